"""A write whose outcome the loop cannot see is reported as unknown, never as not done; and
steps are saved as they happen, so a restart mid-write still shows what had started."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.support import (
    ServiceProcess,
    free_port,
    loop_service,
    mcp_server,
    model_simulator,
    wait_until,
)

from .helpers import EMPLOYEE

SUBMIT = "把我那張家庭旅遊的特休送出審核"


@pytest.fixture(scope="module")
def dependencies(tmp_path_factory) -> Iterator[tuple[Path, str, str]]:
    workdir = tmp_path_factory.mktemp("writes")
    with mcp_server(workdir) as mcp, model_simulator(workdir, profile="instant") as sim:
        yield workdir, f"{mcp}/mcp", f"{sim}/v1"


def leave_db(workdir: Path) -> Path:
    return next(workdir.glob("leave-*.db"))


@contextmanager
def write_lock_held(database: Path) -> Iterator[None]:
    """Another writer holds the leave database's write lock: the MCP server's writes wait."""
    connection = sqlite3.connect(database, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        yield
    finally:
        connection.execute("ROLLBACK")
        connection.close()


def trip(workdir: Path) -> tuple[str, str]:
    with sqlite3.connect(leave_db(workdir)) as connection:
        return connection.execute(
            "SELECT id, status FROM leaves WHERE reason LIKE '家庭旅遊%'"
        ).fetchone()


def test_a_write_that_times_out_is_unknown_then_checked_never_not_done(dependencies):
    workdir, mcp, model = dependencies
    leave_id, before = trip(workdir)
    assert before == "draft"
    with loop_service(workdir, model, mcp, tool_timeout_seconds="1") as (loop, _):
        with write_lock_held(leave_db(workdir)):
            final = httpx.post(
                f"{loop}/v1/runs", json={"input": SUBMIT}, headers=EMPLOYEE, timeout=60
            ).json()
        # The lock is gone: the write the loop gave up on is applied after all.
        wait_until(lambda: trip(workdir)[1] == "submitted", timeout=30, what="the late write")
    assert final["status"] == "failed", final
    assert final["reason"].startswith(f"outcome_unknown: update_leave_status（{leave_id}）"), final
    assert "沒有完成" not in final["answer"]
    assert "無法確認" in final["answer"] and "查詢" in final["answer"]
    assert f"假單 {leave_id} 現在是 draft" in final["answer"]  # what the check saw, then
    update = next(s for s in final["steps"] if s["name"] == "update_leave_status")
    check = next(s for s in final["steps"] if s["type"] == "verify")
    assert update["error"] == "timeout_outcome_unknown"
    assert (check["name"], check["arguments"]) == ("search_leaves", {"keyword": leave_id})


def test_a_write_slower_than_http_defaults_but_within_the_tool_timeout_completes(dependencies):
    workdir, mcp, model = dependencies
    with sqlite3.connect(leave_db(workdir)) as connection:  # the trip is a draft again
        connection.execute("UPDATE leaves SET status = 'draft' WHERE reason LIKE '家庭旅遊%'")
    leave_id, _ = trip(workdir)
    finals: list[dict] = []
    with loop_service(workdir, model, mcp, tool_timeout_seconds="20") as (loop, _):
        with write_lock_held(leave_db(workdir)):
            client = threading.Thread(
                target=lambda: finals.append(
                    httpx.post(
                        f"{loop}/v1/runs", json={"input": SUBMIT}, headers=EMPLOYEE, timeout=60
                    ).json()
                )
            )
            client.start()
            # The write stays blocked past httpx's default 5 s read timeout, well within
            # LOOP_TOOL_TIMEOUT_SECONDS: a slow tool, not a lost connection.
            threading.Event().wait(6.5)
        client.join()
    final = finals[0]
    assert final["status"] == "completed", final
    assert final["answer"] == f"已將 {leave_id} 送出審核。"
    assert trip(workdir) == (leave_id, "submitted")


def test_a_restart_mid_write_leaves_the_started_write_in_the_record(dependencies):
    from loop.store import RunStore

    workdir, mcp, model = dependencies
    with sqlite3.connect(leave_db(workdir)) as connection:  # the trip is a draft again
        connection.execute("UPDATE leaves SET status = 'draft' WHERE reason LIKE '家庭旅遊%'")
    leave_id, _ = trip(workdir)
    store_url = f"sqlite:///{workdir / 'restarted-loop.db'}"
    port = free_port()
    env = {
        "LOOP_PORT": str(port),
        "LOOP_MODEL_BASE_URL": model,
        "LOOP_MCP_URL": mcp,
        "LOOP_STORE_URL": store_url,
    }
    base = f"http://127.0.0.1:{port}"
    body = {"input": SUBMIT, "run_id": "write-then-crash"}

    def started_write() -> bool:
        store = RunStore(store_url)
        try:
            record = store.sync.get_run("write-then-crash", record_owner())
        finally:
            store.dispose()
        steps = record.steps if record else []
        return any(s["name"] == "update_leave_status" for s in steps)

    loop = ServiceProcess(["loop"], env, workdir / "loop-1.log")
    try:
        loop.wait_ready(f"{base}/healthz")
        with write_lock_held(leave_db(workdir)):
            client = threading.Thread(target=post_and_lose_the_answer, args=(base, body))
            client.start()
            wait_until(started_write, timeout=30, what="the write step in the record")
            # The step is saved before the call goes out: kill the loop only once the MCP
            # server has the write in hand, or it may never have been sent.
            wait_until(
                lambda: writes_in_progress(mcp) == 1, timeout=30, what="the write at the server"
            )
            loop.process.kill()  # the loop dies while the write waits for the lock
            loop.stop()
            client.join()
        wait_until(lambda: trip(workdir)[1] == "submitted", timeout=30, what="the late write")
        loop = ServiceProcess(["loop"], env, workdir / "loop-2.log")
        loop.wait_ready(f"{base}/healthz")
        record = httpx.get(f"{base}/v1/runs/write-then-crash", headers=EMPLOYEE).json()
    finally:
        loop.stop()
    assert record["status"] == "failed"
    assert "update_leave_status" in record["reason"] and leave_id in record["reason"]
    assert "outcome is unknown" in record["reason"]
    update = next(s for s in record["steps"] if s["name"] == "update_leave_status")
    assert update["arguments"] == {"leave_id": leave_id, "status": "submitted"}
    assert update["error"] == "interrupted" and update["detail"] == "outcome unknown"
    assert next(s["name"] for s in record["steps"] if s["type"] == "tool") == "search_leaves"


def writes_in_progress(mcp: str) -> float:
    metrics = httpx.get(f"{mcp.removesuffix('/mcp')}/metrics").text
    sample = 'leave_mcp_tool_calls_in_progress{tool="update_leave_status"} '
    return next(
        (
            float(line.removeprefix(sample))
            for line in metrics.splitlines()
            if line.startswith(sample)
        ),
        0.0,
    )


def post_and_lose_the_answer(base: str, body: dict) -> None:
    with pytest.raises(httpx.HTTPError):  # the server dies before it answers
        httpx.post(f"{base}/v1/runs", json=body, headers=EMPLOYEE, timeout=60)


def record_owner() -> str:
    from common.credentials import hash_token

    return hash_token("demo-token-employee")
