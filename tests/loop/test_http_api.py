"""The loop's HTTP API at its edges, over a socket: answers to confirmations it cannot take,
bodies too large or not JSON, methods it does not serve, what the facade does not support, the
shapes of the errors that say so, and the form of its times."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import httpx
import pytest

from tests.support import mcp_server, model_simulator

from .conftest import EMPLOYEE, Stack, loop_service, post_run

QUESTION = "我的假期餘額還有多少？"


@pytest.fixture(scope="module")
def stack(tmp_path_factory, new_database_url) -> Iterator[Stack]:
    """The stack with a confirmation timeout long enough to answer one several times, and the
    loop's default body limit."""
    workdir = tmp_path_factory.mktemp("apistack")
    mcp_db_url = new_database_url(workdir, "leave")
    with (
        mcp_server(workdir, mcp_db_url) as mcp,
        model_simulator(workdir, profile="instant") as sim,
        loop_service(
            workdir,
            f"{sim}/v1",
            f"{mcp}/mcp",
            new_database_url(workdir, "loop"),
            confirmation_timeout_seconds="60",
        ) as (loop, store_url),
    ):
        yield Stack(loop, f"{mcp}/mcp", f"{sim}/v1", store_url, mcp_db_url, workdir)


# --- timestamps -------------------------------------------------------------------------------


def test_run_times_are_rfc3339_with_an_offset_like_step_times(stack):
    final = post_run(stack, {"input": QUESTION}).json()
    record = httpx.get(f"{stack.loop}/v1/runs/{final['id']}", headers=EMPLOYEE).json()
    listed = httpx.get(f"{stack.loop}/v1/runs", headers=EMPLOYEE).json()["runs"]
    mine = next(r for r in listed if r["id"] == final["id"])
    stamps = [
        record["created_at"],
        record["finished_at"],
        mine["created_at"],
        mine["finished_at"],
        *(s["started_at"] for s in record["steps"]),
    ]
    for stamp in stamps:
        assert stamp.endswith("+00:00"), stamps
        assert dt.datetime.fromisoformat(stamp).utcoffset() == dt.timedelta(0)
    created = dt.datetime.fromisoformat(record["created_at"])
    assert created <= dt.datetime.fromisoformat(record["steps"][0]["started_at"])
