"""The spike shape on a real Locust run against the simulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadtest.settings import LoadSettings
from tests.support import REPO_ROOT, model_simulator

PHASE_SECONDS = 4


def load(args: list[str], results: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOAD_")}
    done = subprocess.run(
        [sys.executable, "-m", "loadtest", *args, "--results-dir", str(results)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (path,) = results.glob("*/summary.json")
    summary: dict[str, Any] = json.loads(path.read_text())
    return summary


@pytest.fixture(scope="module")
def spiked(tmp_path_factory) -> Iterator[dict[str, Any]]:
    """One spike run (1 user, 4 for 4 s, 1 again) of model users."""
    workdir: Path = tmp_path_factory.mktemp("spike")
    with model_simulator(workdir, profile="gpu") as sim:
        yield load(
            [
                *("--model-url", f"{sim}/v1", "--user-classes", "model", "--max-tokens", "32"),
                *("--shape", "spike", "--users", "1", "--spike-factor", "4"),
                *("--spike-start-seconds", str(PHASE_SECONDS)),
                *("--spike-seconds", str(PHASE_SECONDS)),
                *("--duration-seconds", str(3 * PHASE_SECONDS)),
            ],
            workdir / "results",
        )


def test_the_spike_is_its_own_step_between_two_baselines(spiked):
    steps = spiked["steps"]
    assert [(s["phase"], s["users"]) for s in steps] == [
        ("baseline", 1),
        ("spike", 4),
        ("recovery", 1),
    ]
    for step in steps[:2]:
        assert step["seconds"] == pytest.approx(PHASE_SECONDS, abs=0.5)
    assert all(s["errors"] == 0 for s in steps)
    baseline, spike, _ = (s["model"] for s in steps)
    # four users send more than twice what one does, and the spike's percentiles are its own
    assert spike["requests_per_s"] > 2 * baseline["requests_per_s"]
    assert spike["ttft_ms"]["count"] == spike["requests"]


def test_the_spike_must_leave_a_baseline_after_it():
    with pytest.raises(ValueError, match="not before duration_seconds"):
        LoadSettings(shape="spike", duration_seconds=20, spike_start_seconds=10, spike_seconds=10)
    steps = LoadSettings(shape="spike", users=3, spike_factor=2.5).schedule()
    assert [(s.offset, s.users, s.phase) for s in steps] == [
        (0, 3, "baseline"),
        (10, 8, "spike"),
        (20, 3, "recovery"),
    ]
