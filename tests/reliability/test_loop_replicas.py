"""Two loop processes on one PostgreSQL run store: neither marks the other's live runs as
interrupted when it starts; a restarted loop still marks the runs it left behind, and a run
left waiting for a confirmation is taken over, by the same loop restarted or by another once
the dead one's lease lapses."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.loop.helpers import StreamedRun, answer_when_shown
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


def start_waiting_run(loop: str, until: str = "confirmation.requested") -> StreamedRun:
    """A streamed run, read on a thread to the end of its stream, once it has reached the
    event `until` (by default its confirmation, where it waits)."""
    streamed = StreamedRun(loop, {"input": CANCEL}, EMPLOYEE, timeout=120).in_background()
    assert streamed.wait_for(until, 60), (streamed.events, streamed.error)
    return streamed


def killed_with_a_run(
    workdir: Path, env: dict[str, str], until: str = "confirmation.requested"
) -> str:
    """`python -m loop` on `env`, killed (as a crash ends it: no shutdown, no record of how
    anything ended) once its run reaches `until`; the run's id."""
    base = f"http://127.0.0.1:{env['LOOP_PORT']}"
    loop = ServiceProcess(["loop"], env, workdir / f"loop-{secrets.token_hex(3)}.log")
    loop.wait_ready(f"{base}/healthz")
    run_id = start_waiting_run(base, until).run_id
    loop.process.kill()
    loop.process.wait()
    loop.stop()
    return run_id


def loop_env(model: str, mcp: str, store: str, instance_id: str) -> dict[str, str]:
    return {"LOOP_PORT": str(free_port()), "LOOP_MODEL_BASE_URL": model, "LOOP_MCP_URL": mcp,
            "LOOP_STORE_URL": store, "LOOP_INSTANCE_ID": instance_id,
            "LOOP_LEASE_SECONDS": "20"}  # fmt: skip


def test_a_second_loop_leaves_the_first_ones_waiting_run_alone(shared):
    workdir, model, mcp, store = shared
    with loop_service(workdir, model, mcp, store, instance_id="loop-a") as (first, _):
        waiting = start_waiting_run(first)
        run_id = waiting.run_id
        with loop_service(workdir, model, mcp, store, instance_id="loop-b"):
            assert status(store, run_id) == ("running", None)  # loop-b started: still running
            answer_when_shown(first, run_id, "decline", within=5)  # and loop-a takes the answer
            waiting.join(60)
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
        _, final = answer_when_shown(loop, waiting, "decline", within=5)
    assert final.status == "completed" and "維持已核准" in (final.answer or ""), final
    # it does not come back: another loop takes the run over once its lease has lapsed
    gone = killed_with_a_run(workdir, env)
    with loop_service(workdir, model, mcp, store, instance_id="loop-f",
                      lease_seconds="20") as (loop, _):  # fmt: skip
        held = httpx.get(f"{loop}/v1/runs/{gone}", headers=EMPLOYEE, timeout=10).json()
        assert held["status"] == "running" and not held["confirmations"]  # loop-e's still
        _, final = answer_when_shown(loop, gone, "decline", within=60)
    assert final.status == "completed", final
