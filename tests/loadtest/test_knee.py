"""A stepped sweep against the simulator finds the capacity its latency model predicts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.summary import LoadSummary
from tests.support import REPO_ROOT, model_simulator

MAX_NUM_SEQS = 2
PREFILL_MS = 50.0
ITL_MS = 50.0
# Every seed conversation makes at least 10 tokens (10, 29 and 14), so max_tokens cuts each
# request to exactly this many and the service time is the same for all.
OUTPUT_TOKENS = 10
TTFT_SLO_MS = 200.0
STEP_USERS = (1, 2, 3, 4)


def predicted_capacity() -> int:
    """The highest step whose TTFT p99 the latency model keeps within the SLO.

    Service time S = prefill + (tokens − 1) × ITL = 50 + 9 × 50 = 500 ms (slowdown 0).
    Up to max_num_seqs users nothing waits: TTFT = prefill = 50 ms, 150 ms under the SLO.
    With N > max_num_seqs users and no think time the slots never idle, so throughput is
    M / S and Little's law gives the mean queue wait (N − M) × S / M: for N = 3, M = 2 that is
    250 ms, so TTFT p99 ≥ mean ≥ 50 + 250 = 300 ms, 100 ms over the SLO.
    """
    service_ms = PREFILL_MS + (OUTPUT_TOKENS - 1) * ITL_MS
    meeting = []
    for users in STEP_USERS:
        queue_wait_ms = max(users - MAX_NUM_SEQS, 0) * service_ms / MAX_NUM_SEQS
        if PREFILL_MS + queue_wait_ms <= TTFT_SLO_MS:
            meeting.append(users)
    return max(meeting)


@pytest.mark.timeout(90)
def test_a_stepped_sweep_finds_the_simulators_knee(tmp_path: Path) -> None:
    prediction = predicted_capacity()
    # the steps straddle the knee: one at it, one past it
    assert prediction in STEP_USERS and prediction + 1 in STEP_USERS
    with model_simulator(
        tmp_path,
        profile="gpu",
        max_num_seqs=str(MAX_NUM_SEQS),
        prefill_overhead_ms=str(PREFILL_MS),
        prefill_per_token_ms="0",
        itl_ms=str(ITL_MS),
        slowdown_per_running="0",
    ) as sim:
        done = subprocess.run(
            [
                *(sys.executable, "-m", "loadtest", "--model-url", f"{sim}/v1"),
                *("--user-classes", "model", "--model-think-seconds", "0"),
                *("--max-tokens", str(OUTPUT_TOKENS), "--shape", "steps"),
                *("--users", str(STEP_USERS[0]), "--step-users", "1"),
                *("--steps", str(len(STEP_USERS)), "--step-seconds", "5"),
                *("--slo-ttft-p99-ms", str(TTFT_SLO_MS), "--slo-itl-p99-ms", "1000"),
                *("--prometheus-url", "off", "--results-dir", str(tmp_path / "results")),
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=80,
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (summary_path,) = (tmp_path / "results").glob("*/summary.json")
    summary = LoadSummary.read(summary_path).as_json()
    steps = summary["steps"]
    # the sweep ended after the first step past the knee (LOAD_STOP_AT_BREAK)
    assert [s["users"] for s in steps] == list(STEP_USERS[: STEP_USERS.index(prediction) + 2])
    assert not steps[-1]["slo_met"]
    assert all(s["errors"] == 0 for s in steps), [s["error_examples"] for s in steps]
    assert all(s["model"]["output_tokens"] == OUTPUT_TOKENS * s["model"]["requests"] for s in steps)
    verdicts = {s["users"]: (s["model"]["ttft_ms"]["p99"], s["slo_broken"]) for s in steps}
    assert summary["capacity_at_slo"]["users"] == prediction, verdicts
