"""`python -m loadtest --web-port N`: Locust's web UI shows the run as it goes, and Ctrl-C ends it
with the same reports and summary as a headless run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from loadtest.summary import LoadSummary
from ops.services import free_port, wait_until
from tests.support import REPO_ROOT, model_simulator


def ui_completions(base: str) -> int:
    """Completions the UI has counted: each fires ttft, tpot and e2e; e2e once per request."""
    try:
        stats = httpx.get(f"{base}/stats/requests", timeout=2).json()
    except (httpx.HTTPError, ValueError):
        return 0
    return sum(row["num_requests"] for row in stats["stats"] if row["name"] == "e2e")


@pytest.mark.timeout(120)
def test_web_ui_shows_the_run_and_ctrl_c_writes_the_summary(tmp_path):
    port = free_port()
    ui = f"http://127.0.0.1:{port}"
    with model_simulator(tmp_path, profile="instant") as sim:
        load = subprocess.Popen(
            [
                *(sys.executable, "-m", "loadtest", "--model-url", f"{sim}/v1"),
                *("--user-classes", "model", "--shape", "constant", "--users", "2"),
                *("--duration-seconds", "300"),
                *("--model-think-seconds", "0.05", "--web-port", str(port)),
                *("--results-dir", str(tmp_path / "results")),
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own group, as a terminal's Ctrl-C would reach it
        )
        try:
            # started without a click (--autostart), counted by the UI's own stats
            wait_until(lambda: ui_completions(ui) >= 20, timeout=60, what="the web UI's counts")
            page = httpx.get(ui, timeout=5)
            assert page.status_code == 200 and "Locust" in page.text
            os.killpg(load.pid, signal.SIGINT)  # Ctrl-C, to both the wrapper and Locust
            try:
                output, _ = load.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(load.pid, signal.SIGKILL)
                pytest.fail(f"Ctrl-C did not end the run:\n{load.communicate()[0][-3000:]}")
        finally:
            if load.poll() is None:
                os.killpg(load.pid, signal.SIGKILL)
    assert load.returncode == 0, output[-3000:]
    assert f"web UI: {ui}" in output
    (run_dir,) = (tmp_path / "results").iterdir()
    assert (run_dir / "locust.html").stat().st_size > 0
    assert (run_dir / "locust_stats.csv").exists()
    step = LoadSummary.read(run_dir / "summary.json").as_json()["steps"][0]
    assert step["model"]["requests"] >= 20 and step["errors"] == 0  # what the UI had counted


@pytest.mark.timeout(120)
def test_a_locust_stopped_by_sigterm_still_leaves_its_html_report(tmp_path):
    """SIGTERM is the wrapper's last resort for a Ctrl-C Locust did not hear; Locust's own
    SIGTERM path writes no HTML report (a full-suite run ended without locust.html)."""
    port = free_port()
    with model_simulator(tmp_path, profile="instant") as sim:
        load = subprocess.Popen(
            [
                *(sys.executable, "-m", "loadtest", "--model-url", f"{sim}/v1"),
                *("--user-classes", "model", "--shape", "constant", "--users", "2"),
                *("--duration-seconds", "300", "--model-think-seconds", "0.05"),
                *("--web-port", str(port), "--results-dir", str(tmp_path / "results")),
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            ui = f"http://127.0.0.1:{port}"
            wait_until(lambda: ui_completions(ui) >= 10, timeout=60, what="the web UI's counts")
            (locust,) = Path(f"/proc/{load.pid}/task/{load.pid}/children").read_text().split()
            os.kill(int(locust), signal.SIGTERM)
            output, _ = load.communicate(timeout=60)
        finally:
            if load.poll() is None:
                load.kill()
    (run_dir,) = (tmp_path / "results").iterdir()
    assert (run_dir / "locust.html").stat().st_size > 0, output[-3000:]
    assert (run_dir / "summary.json").exists()
