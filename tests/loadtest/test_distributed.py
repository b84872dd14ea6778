"""Locust's distribution: `--processes` forks, and a master with two workers started apart on
loopback. Every worker's raw log lands in the run's folder and the summary counts them all."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadtest.summary import LoadSummary
from tests.support import REPO_ROOT, free_port, model_simulator

SECONDS = "4"


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Iterator[str]:
    with model_simulator(tmp_path_factory.mktemp("distributed"), profile="instant") as base:
        yield base


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOAD_")}
    return env | {"LOAD_PROMETHEUS_URL": "off", **extra}


def load_command(sim: str, results: Path, *locust_args: str) -> list[str]:
    return [
        *(sys.executable, "-m", "loadtest", "--model-url", f"{sim}/v1"),
        *("--user-classes", "model", "--shape", "constant", "--users", "4"),
        *("--duration-seconds", SECONDS),
        *("--model-think-seconds", "0.05", "--max-tokens", "16"),
        *("--results-dir", str(results), "--", *locust_args),
    ]


def merged(results: Path) -> tuple[dict[str, Any], dict[str, int]]:
    """(the summary's only step, lines per raw log)."""
    (run_dir,) = results.iterdir()
    lines = {p.name: len(p.read_text().splitlines()) for p in run_dir.glob("raw-*.jsonl")}
    (step,) = LoadSummary.read(run_dir / "summary.json").as_json()["steps"]
    return step, lines


def test_processes_fork_workers_whose_raw_logs_are_all_summarised(sim, tmp_path):
    done = subprocess.run(
        load_command(sim, tmp_path, "--processes", "2"),
        cwd=REPO_ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    step, lines = merged(tmp_path)
    assert len(lines) == 2 and all(lines.values()), lines
    assert step["errors"] == 0 and step["model"]["requests"] == sum(lines.values())


def test_a_master_and_two_workers_on_loopback(sim, tmp_path):
    port = free_port()
    master = subprocess.Popen(
        load_command(
            sim,
            tmp_path / "results",
            *("--master", "--expect-workers", "2"),
            *("--master-bind-host", "127.0.0.1", "--master-bind-port", str(port)),
        ),
        cwd=REPO_ROOT,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # Workers elsewhere, with settings of their own that would fail: they must load with the
    # master's (model URL, max tokens) and write where the master reads.
    wrong = {
        "LOAD_MODEL_URL": f"http://127.0.0.1:{free_port()}/v1",  # nothing listens there
        "LOAD_RESULTS_DIR": str(tmp_path / "not-here"),
        "LOAD_MAX_TOKENS": "256",
        "PYTHONPATH": str(REPO_ROOT),
    }
    worker_command = [
        *(sys.executable, "-m", "locust", "-f", str(REPO_ROOT / "loadtest" / "locustfile.py")),
        *("--worker", "--master-host", "127.0.0.1", "--master-port", str(port)),
    ]
    workers = [
        subprocess.Popen(
            worker_command,
            cwd=tmp_path,
            env=clean_env(**wrong),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        output, _ = master.communicate(timeout=90)
        assert master.returncode == 0, output[-4000:]
        for worker in workers:  # the master's quit ends them
            worker_output, _ = worker.communicate(timeout=30)
            assert worker.returncode == 0, worker_output[-3000:]
    finally:
        for process in (master, *workers):
            if process.poll() is None:
                process.kill()
                process.communicate()
    step, lines = merged(tmp_path / "results")
    assert len(lines) == 2 and all(lines.values()), lines
    assert step["errors"] == 0, step["error_examples"]
    assert step["model"]["requests"] == sum(lines.values())
    assert step["model"]["output_tokens"] <= 16 * step["model"]["requests"]  # not their 256
    assert not (tmp_path / "not-here").exists()
