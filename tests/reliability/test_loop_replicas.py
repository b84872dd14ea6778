"""Two loop processes on one PostgreSQL run store: neither marks the other's live runs as
interrupted when it starts; a restarted loop still marks the runs it left behind, and a run
left waiting for a confirmation is taken over, by the same loop restarted or by another once
the dead one's lease lapses."""

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


def start_waiting_run(
    loop: str, until: str = "confirmation.requested"
) -> tuple[str, str, threading.Thread]:
    """A streamed run followed until the event `until` (by default its confirmation, where it
    waits): (run id, confirmation id or "", its reader)."""
    found: dict[str, str] = {}
    reached = threading.Event()

    def read() -> None:
        try:
            with httpx.stream("POST", f"{loop}/v1/runs", headers=EMPLOYEE, timeout=120,
                              json={"input": CANCEL, "stream": True}) as response:  # fmt: skip
                for event in sse.events(response.iter_lines()):
                    if event.event == "run.started":
                        found["run"] = event.json()["id"]
                    elif event.event == "confirmation.requested":
                        found["confirmation"] = event.json()["confirmation_id"]
                    if event.event == until:
                        found["reached"] = until
                        reached.set()
        except httpx.HTTPError:
            pass  # the loop was killed under it
        reached.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert reached.wait(60) and "reached" in found, found
    return found["run"], found.get("confirmation", ""), reader


def killed_with_a_run(
    workdir: Path, env: dict[str, str], until: str = "confirmation.requested"
) -> str:
    """`python -m loop` on `env`, killed (as a crash ends it: no shutdown, no record of how
    anything ended) once its run reaches `until`; the run's id."""
    base = f"http://127.0.0.1:{env['LOOP_PORT']}"
    loop = ServiceProcess(["loop"], env, workdir / f"loop-{secrets.token_hex(3)}.log")
    loop.wait_ready(f"{base}/healthz")
    run_id, _, _ = start_waiting_run(base, until)
    loop.process.kill()
    loop.process.wait()
    loop.stop()
    return run_id


def loop_env(model: str, mcp: str, store: str, instance_id: str) -> dict[str, str]:
    return {"LOOP_PORT": str(free_port()), "LOOP_MODEL_BASE_URL": model, "LOOP_MCP_URL": mcp,
            "LOOP_STORE_URL": store, "LOOP_INSTANCE_ID": instance_id,
            "LOOP_LEASE_SECONDS": "20"}  # fmt: skip


def answer_when_shown(loop: str, run_id: str, timeout: float) -> dict:
    """Wait until `loop` shows the run's confirmation, decline it, and wait for the run's end."""
    with httpx.Client(base_url=loop, headers=EMPLOYEE, timeout=30) as http:
        seen: list[dict] = []

        def shown(done: bool = False) -> bool:
            seen.append(http.get(f"/v1/runs/{run_id}").json())
            return seen[-1]["status"] != "running" if done else bool(seen[-1]["confirmations"])

        wait_until(shown, timeout=timeout, what=f"{loop} to take over {run_id}")
        (question,) = seen[-1]["confirmations"]
        answered = http.post(
            f"/v1/runs/{run_id}/confirmations/{question['confirmation_id']}",
            json={"action": "decline"},
        )
        assert answered.status_code == 200, answered.text
        wait_until(lambda: shown(done=True), timeout=60, what=f"{run_id} to finish")
    return seen[-1]


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
    """Runs cut off in the middle of their work (a model call that takes a minute)."""
    workdir, _, mcp, store = shared
    with model_simulator(workdir, profile="instant", prefill_overhead_ms="60000") as slow:
        env = loop_env(f"{slow}/v1", mcp, store, "loop-c")
        # it comes back under the same identity: its own orphan is marked as it starts
        orphan = killed_with_a_run(workdir, env, until="model.started")
        assert status(store, orphan) == ("running", None)
        with loop_service(workdir, f"{slow}/v1", mcp, store, instance_id="loop-c",
                          lease_seconds="20"):  # fmt: skip
            state, reason = status(store, orphan)
            assert state == "failed" and "stopped during the run" in (reason or ""), reason
        # it does not come back: another loop marks its run once its lease has lapsed (20 s:
        # longer than a loop takes to start here, so loop-d starts while it still holds)
        gone = killed_with_a_run(workdir, env, until="model.started")
        with loop_service(workdir, f"{slow}/v1", mcp, store, instance_id="loop-d",
                          lease_seconds="20"):  # fmt: skip
            assert status(store, gone)[0] == "running"  # the lease had not lapsed yet
            wait_until(lambda: status(store, gone)[0] == "failed", timeout=60,
                       what="loop-d sweeping the run of the loop that died")  # fmt: skip


def test_a_crashed_loops_waiting_run_is_taken_over_by_it_restarted_or_by_another(shared):
    workdir, model, mcp, store = shared
    env = loop_env(model, mcp, store, "loop-e")
    # it comes back under the same identity: it takes its waiting run over as it starts
    waiting = killed_with_a_run(workdir, env)
    with loop_service(workdir, model, mcp, store, instance_id="loop-e") as (loop, _):
        final = answer_when_shown(loop, waiting, timeout=5)
    assert final["status"] == "completed" and "維持已核准" in final["answer"], final
    # it does not come back: another loop takes the run over once its lease has lapsed
    gone = killed_with_a_run(workdir, env)
    with loop_service(workdir, model, mcp, store, instance_id="loop-f",
                      lease_seconds="20") as (loop, _):  # fmt: skip
        held = httpx.get(f"{loop}/v1/runs/{gone}", headers=EMPLOYEE, timeout=10).json()
        assert held["status"] == "running" and not held["confirmations"]  # loop-e's still
        final = answer_when_shown(loop, gone, timeout=60)
    assert final["status"] == "completed", final
