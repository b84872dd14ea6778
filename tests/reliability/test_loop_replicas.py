"""Two loop processes on one PostgreSQL run store: neither marks the other's live runs as
interrupted when it starts, and a restarted loop still marks the runs it left behind."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from common import sse
from tests.support import (
    ServiceProcess,
    free_port,
    loop_service,
    mcp_server,
    model_simulator,
    wait_until,
)

pytestmark = pytest.mark.reliability
EMPLOYEE = {"Authorization": "Bearer demo-token-employee"}
CANCEL = "取消我表妹婚禮那張假"  # asks for a confirmation, and waits for the person


@pytest.fixture(scope="module")
def shared(postgres, tmp_path_factory) -> Iterator[tuple[Path, str, str, str]]:
    """An MCP server, a simulator, and the loops' store on a real PostgreSQL."""
    workdir = tmp_path_factory.mktemp("loops")
    name = f"loops_{secrets.token_hex(4)}"
    password = secrets.token_urlsafe(16)
    postgres.create_database(name, owner_password=password)
    store = str(postgres.url(name, name, password))
    with mcp_server(workdir) as mcp, model_simulator(workdir, profile="instant") as sim:
        yield workdir, f"{sim}/v1", f"{mcp}/mcp", store


def status(store: str, run_id: str) -> tuple[str, str | None]:
    engine = create_engine(store)
    try:
        with engine.connect() as connection:
            row = connection.execute(
                text("SELECT status, reason FROM runs WHERE id = :id"), {"id": run_id}
            ).one()
    finally:
        engine.dispose()
    return row[0], row[1]


def start_waiting_run(loop: str) -> tuple[str, str, threading.Thread]:
    """A streamed run that stops at its confirmation: (run id, confirmation id, its reader)."""
    found: dict[str, str] = {}
    asked = threading.Event()

    def read() -> None:
        try:
            with httpx.stream("POST", f"{loop}/v1/runs", headers=EMPLOYEE, timeout=120,
                              json={"input": CANCEL, "stream": True}) as response:  # fmt: skip
                for event in sse.events(response.iter_lines()):
                    if event.event == "run.started":
                        found["run"] = event.json()["id"]
                    elif event.event == "confirmation.requested":
                        found["confirmation"] = event.json()["confirmation_id"]
                        asked.set()
        except httpx.HTTPError:
            pass  # the loop was killed under it
        asked.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert asked.wait(60) and "confirmation" in found, found
    return found["run"], found["confirmation"], reader


def test_a_second_loop_leaves_the_first_ones_waiting_run_alone(shared):
    workdir, model, mcp, store = shared
    with loop_service(workdir, model, mcp, store, instance_id="loop-a") as (first, _):
        run_id, confirmation, reader = start_waiting_run(first)
        with loop_service(workdir, model, mcp, store, instance_id="loop-b"):
            assert status(store, run_id) == ("running", None)  # loop-b started: still running
            answered = httpx.post(
                f"{first}/v1/runs/{run_id}/confirmations/{confirmation}",
                json={"action": "decline"}, headers=EMPLOYEE, timeout=30,
            )  # fmt: skip
            assert answered.status_code == 200, answered.text
            reader.join(60)
        assert status(store, run_id)[0] == "completed"


def test_a_restarted_loop_marks_the_run_it_left_and_a_dead_ones_runs_are_swept(shared):
    workdir, model, mcp, store = shared
    port = free_port()
    env = {"LOOP_PORT": str(port), "LOOP_MODEL_BASE_URL": model, "LOOP_MCP_URL": mcp,
           "LOOP_STORE_URL": store, "LOOP_INSTANCE_ID": "loop-c", "LOOP_LEASE_SECONDS": "20"}  # fmt: skip
    base = f"http://127.0.0.1:{port}"

    def killed_with_a_waiting_run() -> str:
        loop = ServiceProcess(["loop"], env, workdir / f"loop-c-{secrets.token_hex(2)}.log")
        loop.wait_ready(f"{base}/healthz")
        run_id, _, _ = start_waiting_run(base)
        loop.process.kill()  # as a crash ends it: no shutdown, no record of how it ended
        loop.process.wait()
        loop.stop()
        return run_id

    # it comes back under the same identity: its own orphan is marked as it starts
    orphan = killed_with_a_waiting_run()
    assert status(store, orphan) == ("running", None)
    with loop_service(workdir, model, mcp, store, instance_id="loop-c", lease_seconds="20"):
        state, reason = status(store, orphan)
        assert state == "failed" and "stopped during the run" in (reason or ""), reason
    # it does not come back: another loop marks its run once its lease has lapsed (20 s:
    # longer than a loop takes to start here, so loop-d starts while it still holds)
    gone = killed_with_a_waiting_run()
    with loop_service(workdir, model, mcp, store, instance_id="loop-d", lease_seconds="20"):
        assert status(store, gone)[0] == "running"  # the lease had not lapsed yet
        wait_until(lambda: status(store, gone)[0] == "failed", timeout=60,
                   what="loop-d sweeping the run of the loop that died")  # fmt: skip
