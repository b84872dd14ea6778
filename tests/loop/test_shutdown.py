"""Stopping the service mid-run: a run that was working records how it ended before the store
closes; a run that was waiting for a person's confirmation outlives the service, and the loop
that starts next goes on with it once the person answers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

from mcp_server.leaves import LeaveService
from mcp_server.storage import Database
from tests.support import (
    REPO_ROOT,
    free_port,
    mcp_server,
    model_simulator,
    running,
    wait_until,
)

from .helpers import EMPLOYEE, StreamedRun, stream_until

WEDDING = "取消我表妹婚禮那張假"


def _settings(port: int, sim: str, mcp: str, store_url: str) -> dict[str, str]:
    return {
        "LOOP_PORT": str(port),
        "LOOP_MODEL_BASE_URL": f"{sim}/v1",
        "LOOP_MCP_URL": f"{mcp}/mcp",
        "LOOP_STORE_URL": store_url,
        "LOOP_CONFIRMATION_TIMEOUT_SECONDS": "120",  # the question stays open meanwhile
    }


def _row(store_url: str, run_id: str) -> tuple[str, str | None, str | None]:
    engine = create_engine(store_url)
    with engine.connect() as connection:
        row = connection.execute(
            text("SELECT status, reason, suspended FROM runs WHERE id = :id"), {"id": run_id}
        ).one()
    engine.dispose()
    return row[0], row[1], row[2]


def test_a_working_run_is_recorded_cancelled_when_the_service_stops(tmp_path):
    # a model that takes a minute to answer: the run is in its model call when the loop stops
    with (
        mcp_server(tmp_path) as mcp,
        model_simulator(tmp_path, profile="instant", prefill_overhead_ms="60000") as sim,
    ):
        port = free_port()
        store_url = f"sqlite:///{tmp_path / 'loop.db'}"
        base = f"http://127.0.0.1:{port}"
        settings = _settings(port, sim, mcp, store_url)
        with running(["loop"], settings, tmp_path / "loop.log", f"{base}/healthz") as loop:
            (started, *_) = stream_until(base, {"input": "查一下我的假單"}, "model.started")
            run_id = started.id
            loop.stop()  # SIGTERM, as compose and Kubernetes stop a container
        log = loop.log()
    assert "did not finish" not in log, log[-2000:]
    # Before, shutdown closed the store under the cancelled run: it stayed "running" until
    # the next start marked it failed as interrupted.
    assert _row(store_url, run_id) == ("cancelled", "cancelled", None)


def test_a_run_waiting_for_confirmation_survives_a_restart_of_the_loop(tmp_path):
    """Item 13 of issue 31: recreating the loop's container (a new host name, so a new
    identity) ended the waiting run's stream and answering it gave 404."""
    store_url = f"sqlite:///{tmp_path / 'loop.db'}"
    with mcp_server(tmp_path) as mcp, model_simulator(tmp_path, profile="instant") as sim:
        first = free_port()
        base = f"http://127.0.0.1:{first}"
        settings = _settings(first, sim, mcp, store_url)
        with running(["loop"], settings, tmp_path / "loop-1.log", f"{base}/healthz") as loop:
            # the person's page keeps the run's event stream open while the loop stops
            follower = StreamedRun(base, {"input": WEDDING}).in_background()
            assert follower.wait_for("confirmation.requested", 30), follower.events
            with httpx.Client(base_url=base, headers=EMPLOYEE) as http:
                asked = http.get(f"/v1/runs/{follower.run_id}").json()["confirmations"]
            loop.stop()
            follower.join(10)
        # Before, the open stream held the loop in "Waiting for connections to close" until
        # it was killed (its lease kept, so no loop could take the run over for 30 s).
        assert loop.process.returncode != -signal.SIGKILL, loop.log()[-2000:]
        assert "Application shutdown complete" in loop.log()
        assert "did not finish" not in loop.log()
        # the stream ended (cut off, or ended early), never with run.finished
        assert follower.over and follower.final is None, (follower.events, follower.error)
        run_id = follower.run_id
        status, _, suspended = _row(store_url, run_id)
        assert status == "running" and suspended is not None  # left to be taken over

        second = free_port()
        base = f"http://127.0.0.1:{second}"
        settings = _settings(second, sim, mcp, store_url)
        with (
            running(["loop"], settings, tmp_path / "loop-2.log", f"{base}/healthz"),
            httpx.Client(base_url=base, headers=EMPLOYEE, timeout=30) as http,
        ):
            waiting = http.get(f"/v1/runs/{run_id}").json()
            assert waiting["status"] == "running" and waiting["confirmations"] == asked
            (question,) = asked
            assert "LV-" in question["message"] and question["schema"]["type"] == "object"
            # another person cannot answer it, nor see it
            other = {"Authorization": "Bearer demo-token-other"}
            path = f"/v1/runs/{run_id}/confirmations/{question['confirmation_id']}"
            assert http.post(path, json={"action": "accept"}, headers=other).status_code == 404
            answered = http.post(path, json={"action": "accept"})
            assert answered.status_code == 200, answered.text
            assert http.post(path, json={"action": "accept"}).status_code == 409
            seen: list[dict] = []

            def finished() -> bool:
                seen.append(http.get(f"/v1/runs/{run_id}").json())
                return seen[-1]["status"] != "running"

            wait_until(finished, timeout=30, what="the resumed run to finish")
            final = seen[-1]
    assert final["status"] == "completed", final
    assert final["answer"].startswith("已取消假單"), final["answer"]
    cancels = [s for s in final["steps"] if s["name"] == "cancel_approved_leave"]
    assert len(cancels) == 1 and cancels[0]["error"] is None, cancels  # one step for the call
    assert _wedding_status(tmp_path) == "cancelled"
    assert _row(store_url, run_id)[2] is None  # nothing left to resume


def _wedding_status(workdir: Path) -> str:
    (db,) = workdir.glob("leave-*.db")
    database = Database(f"sqlite:///{db}")
    try:
        (leave,) = LeaveService(database).search("E001", "表妹婚禮", None)
        return leave.status
    finally:
        database.dispose()


def test_the_terminal_client_follows_its_run_across_a_restart_of_the_loop(tmp_path):
    """`python -m loop.cli` asks its question; the loop restarts while the person thinks; the
    answer reaches the new loop and the client follows the run to its end."""
    store_url = f"sqlite:///{tmp_path / 'loop.db'}"
    with mcp_server(tmp_path) as mcp, model_simulator(tmp_path, profile="instant") as sim:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        settings = _settings(port, sim, mcp, store_url)
        with running(["loop"], settings, tmp_path / "loop-1.log", f"{base}/healthz") as loop:
            client = subprocess.Popen(
                [sys.executable, "-m", "loop.cli", "--url", base, WEDDING],
                cwd=REPO_ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", "LEAVE_TOKEN": "demo-token-employee"},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            assert client.stdin is not None and client.stdout is not None
            lines: list[str] = []
            for line in client.stdout:  # until the question is on the screen
                lines.append(line)
                if line.startswith("❓"):
                    break
            loop.stop()
        # the same address, as a recreated container has: the client knows only that
        with running(["loop"], settings, tmp_path / "loop-2.log", f"{base}/healthz"):
            said, _ = client.communicate("y\n", timeout=60)
    output = "".join(lines) + said
    assert client.returncode == 0, output
    assert "the stream ended before the run did" in output
    assert "■ completed" in output and "已取消假單" in output, output
    assert _wedding_status(tmp_path) == "cancelled"
