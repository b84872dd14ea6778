"""The numbers drive money: Locust's measurements against what the simulator produced.

The simulator writes each streamed request's timing as it produced it (`SIM_TIMING_LOG`: the
first token after arrival, every gap between tokens); that is the truth. The load tool's exact
p50 and p95 of TTFT and ITL must agree with it within 5 %, and its token rate with the
simulator's own counter. The latencies are those of a large model on one GPU under load: the error is a few
milliseconds of the load generator's own scheduling (docs/loadtest.md), 5 % of these figures.
"""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from loadtest.results import percentile
from tests.support import REPO_ROOT, model_simulator

PREFILL_MS = 250.0
ITL_MS = 50.0
WITHIN = 0.05


def generated_tokens(base: str) -> float:
    text = httpx.get(f"{base}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:generation_tokens_total")
    )


def agree(measured: float, truth: float) -> bool:
    return abs(measured - truth) <= WITHIN * truth


@pytest.mark.timeout(180)
def test_ttft_itl_and_tokens_per_second_match_the_produced_truth(tmp_path):
    timing_log = tmp_path / "sim-timing.jsonl"
    with model_simulator(
        tmp_path,
        profile="gpu",
        prefill_overhead_ms=str(PREFILL_MS),
        prefill_per_token_ms="0",
        itl_ms=str(ITL_MS),
        slowdown_per_running="0",
        timing_log=str(timing_log),
    ) as sim:
        before = generated_tokens(sim)
        done = subprocess.run(
            [
                *(sys.executable, "-m", "loadtest", "--model-url", f"{sim}/v1"),
                *("--user-classes", "model", "--shape", "constant", "--users", "8"),
                *("--duration-seconds", "10"),
                *("--results-dir", str(tmp_path / "results")),
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=150,
        )
        after = generated_tokens(sim)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (summary_path,) = (tmp_path / "results").glob("*/summary.json")
    step = json.loads(summary_path.read_text())["steps"][0]
    model = step["model"]
    assert model["requests"] >= 40 and step["errors"] == 0

    produced = [json.loads(line) for line in timing_log.read_text().splitlines()]
    # requests cut off when the run stopped are in neither record
    assert len(produced) >= model["requests"]
    truth_ttft = [r["ttft_s"] * 1000 for r in produced]
    truth_itl = [gap * 1000 for r in produced for gap in r["itl_s"]]
    figures = {
        "ttft": (model["ttft_ms"], truth_ttft),
        "itl": (model["itl_ms"], truth_itl),
    }
    table = {
        name: {f"p{p}": (round(got[f"p{p}"], 2), round(percentile(truth, p), 2)) for p in (50, 95)}
        for name, (got, truth) in figures.items()
    }
    print(f"measured vs produced (ms): {table}")
    for name, by_percentile in table.items():
        for p, (measured, truth) in by_percentile.items():
            assert agree(measured, truth), f"{name} {p}: measured {measured} vs produced {truth}"
    # No token can be seen before it is sent: a clock that starts late reads under the truth.
    assert model["ttft_ms"]["p50"] >= PREFILL_MS
    # the simulator produced what it was told (its own fidelity, not the load tool's)
    assert agree(percentile(truth_ttft, 50), PREFILL_MS)
    assert agree(percentile(truth_itl, 50), ITL_MS)
    # every token the simulator counted was counted by the client from `usage`, and vice versa
    assert model["output_tokens"] == after - before
    counter_rate = (after - before) / step["seconds"]
    assert model["output_tokens_per_s"] == pytest.approx(counter_rate, rel=0.05)
