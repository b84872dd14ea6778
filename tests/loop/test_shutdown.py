"""Stopping the service mid-run: the run records how it ended before the store closes."""

from __future__ import annotations

import httpx
from sqlalchemy import create_engine, text

from common import sse
from tests.support import free_port, mcp_server, model_simulator, running

from .helpers import EMPLOYEE


def test_a_run_waiting_for_confirmation_is_recorded_cancelled_when_the_service_stops(tmp_path):
    with mcp_server(tmp_path) as mcp, model_simulator(tmp_path, profile="instant") as sim:
        port = free_port()
        store_url = f"sqlite:///{tmp_path / 'loop.db'}"
        settings = {
            "LOOP_PORT": str(port),
            "LOOP_MODEL_BASE_URL": f"{sim}/v1",
            "LOOP_MCP_URL": f"{mcp}/mcp",
            "LOOP_STORE_URL": store_url,
            "LOOP_CONFIRMATION_TIMEOUT_SECONDS": "120",  # the question stays open until we stop
        }
        base = f"http://127.0.0.1:{port}"
        with running(["loop"], settings, tmp_path / "loop.log", f"{base}/healthz") as loop:
            run_id = _start_and_wait_for_question(base)
            loop.stop()  # SIGTERM, as compose and Kubernetes stop a container
        log = loop.log()
    assert "did not finish" not in log, log[-2000:]
    engine = create_engine(store_url)
    with engine.connect() as connection:
        status, reason = connection.execute(
            text("SELECT status, reason FROM runs WHERE id = :id"), {"id": run_id}
        ).one()
    engine.dispose()
    # Before, shutdown closed the store under the cancelled run: it stayed "running" until
    # the next start marked it failed as interrupted.
    assert (status, reason) == ("cancelled", "cancelled")


def _start_and_wait_for_question(base: str) -> str:
    run_id = ""
    with (
        httpx.Client(base_url=base, headers=EMPLOYEE, timeout=60) as http,
        http.stream(
            "POST", "/v1/runs", json={"input": "取消我表妹婚禮那張假", "stream": True}
        ) as response,
    ):
        for event in sse.events(response.iter_lines()):
            if event.event == "run.started":
                run_id = event.json()["id"]
            if event.event == "confirmation.requested":
                return run_id
    raise AssertionError("the run finished without asking for confirmation")
