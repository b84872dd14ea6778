"""The numbers drive money: Locust's measurements against what the simulator produced.

The simulator writes each streamed request's timing as it produced it (`SIM_TIMING_LOG`: its
id, the first token after arrival, every gap between tokens); that is the truth, and each of
the load tool's requests pairs with its own line there by the completion's id.

Structural, on any machine: the tool sees every token the server produced, one gap per gap,
none before it was produced (its clock starts before the request is sent, and a token arrives
after it was made), and most before the next one is made (streamed, not buffered). That leaves
one error, the tool's lateness in reading each token: the load generator's own scheduling, a
few milliseconds when other processes hold the cores (docs/loadtest.md), measured here from
the pairs. The p50s of TTFT and ITL agree with the truth within 5 %; the p95s within 5 % or
the tool's lateness at p95, whichever is larger. The token count equals the simulator's own
counter.
"""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from common.stats import percentile
from loadtest.summary import LoadSummary
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
    step = LoadSummary.read(summary_path).as_json()["steps"][0]
    model = step["model"]
    assert model["requests"] >= 40 and step["errors"] == 0

    produced = {r["id"]: r for r in map(json.loads, timing_log.read_text().splitlines())}
    measured = [
        json.loads(line)
        for raw in summary_path.parent.glob("raw-*.jsonl")
        for line in raw.read_text().splitlines()
    ]
    # requests cut off when the run stopped are in neither record; every other pairs up
    assert len(measured) == model["requests"] and {r["id"] for r in measured} <= set(produced)
    lateness, first_lateness = [], []  # ms: when the tool saw a token, minus when it was made
    for record in measured:
        truth = produced[record["id"]]
        assert len(record["itl_ms"]) == len(truth["itl_s"]), record["id"]  # every token, once
        seen, made = record["ttft_ms"], truth["ttft_s"] * 1000
        first_lateness.append(seen - made)
        for gap_seen, gap_made in zip(
            [0.0, *record["itl_ms"]], [0.0, *truth["itl_s"]], strict=True
        ):
            seen, made = seen + gap_seen, made + gap_made * 1000
            lateness.append(seen - made)
    pairs = [produced[r["id"]] for r in measured]
    truth_ttft = [r["ttft_s"] * 1000 for r in pairs]
    truth_itl = [gap * 1000 for r in pairs for gap in r["itl_s"]]
    table = {
        name: {p: (got[f"p{p}"], percentile(truth, p)) for p in (50, 95)}
        for name, got, truth in (
            ("ttft", model["ttft_ms"], truth_ttft),
            ("itl", model["itl_ms"], truth_itl),
        )
    }
    late = {"ttft": percentile(first_lateness, 95), "itl": percentile(lateness, 95)}
    print(
        "measured vs produced (ms): "
        + ", ".join(
            f"{name} p{p} {got:.2f} vs {truth:.2f}"
            for name, row in table.items()
            for p, (got, truth) in row.items()
        )
        + f"; the tool late by p50/p95/max {percentile(lateness, 50):.2f}/{late['itl']:.2f}/"
        f"{max(lateness):.2f} ms (first tokens p95 {late['ttft']:.2f})"
    )
    # Structural, whatever else runs: no token seen before it was made (a clock started late
    # would read under the truth), so no TTFT percentile under the produced one; and tokens are
    # streamed, not held back with later ones: the median token is seen before the next is due.
    assert min(lateness) >= -0.01, min(lateness)
    for p, (got, truth) in table["ttft"].items():
        assert got >= truth - 0.01, f"ttft p{p}: measured {got:.2f} under produced {truth:.2f}"
    assert percentile(lateness, 50) < percentile(truth_itl, 50)
    # The medians within 5 %; a p95 within 5 % or the tool's own lateness at p95, the one error
    # left (its wake-ups on a busy machine: milliseconds; a 1 KB-buffered read: many gaps).
    for name, row in table.items():
        got, truth = row[50]
        assert agree(got, truth), f"{name} p50: measured {got:.2f} vs produced {truth:.2f}"
        got, truth = row[95]
        assert abs(got - truth) <= max(WITHIN * truth, late[name]), (
            f"{name} p95: measured {got:.2f} vs produced {truth:.2f}, the tool late by "
            f"{late[name]:.2f} ms at p95"
        )
    # the simulator produced what it was told (its own fidelity, not the load tool's)
    assert agree(percentile(truth_ttft, 50), PREFILL_MS)
    assert agree(percentile(truth_itl, 50), ITL_MS)
    # every token the simulator counted was counted by the client from `usage`, and vice versa
    assert model["output_tokens"] == after - before
    counter_rate = (after - before) / step["seconds"]
    assert model["output_tokens_per_s"] == pytest.approx(counter_rate, rel=0.05)
