"""What the loop's tests share: the demo tokens, `python -m loop` on a free port, running a
run over HTTP and SSE, and the run manager with fakes."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from common.run_client import RunClient, always
from common.runs_protocol import ConfirmAction, Run, RunEvent, RunFinished
from loop.engine import LoopConfig
from loop.metrics import LoopMetrics
from loop.runs import RunManager
from loop.store import RunRecord, RunStore
from ops.services import loop_service as loop_service  # where the tests import it from
from tests.fakes import AnsweringModel, FakePool

EMPLOYEE = {"Authorization": "Bearer demo-token-employee"}
OTHER = {"Authorization": "Bearer demo-token-other"}
MANAGER = {"Authorization": "Bearer demo-token-manager"}


@dataclass
class Stack:
    loop: str
    mcp: str
    model: str
    store_url: str
    mcp_db_url: str
    workdir: Path


def post_run(stack: Stack, body: dict[str, Any], headers=EMPLOYEE) -> httpx.Response:
    return httpx.post(f"{stack.loop}/v1/runs", json=body, headers=headers, timeout=60)


def stream_run(
    base: str, body: dict[str, Any], headers=EMPLOYEE, answer: ConfirmAction | None = None
) -> tuple[list[RunEvent], RunFinished]:
    """Run with SSE; answer each confirmation with `answer` (None = leave it unanswered)."""
    token = headers["Authorization"].removeprefix("Bearer ")
    events: list[RunEvent] = []

    async def streamed() -> RunFinished:
        async with RunClient(base, token) as client:
            return await client.run(
                body["input"],
                answer=always(answer),
                on_event=events.append,
                session_id=body.get("session_id"),
                run_id=body.get("run_id"),
                confirm=body.get("confirm"),
            )

    final = asyncio.run(streamed())
    assert events[-1] is final
    return events, final


def tool_steps(final: dict[str, Any] | Run) -> list[tuple[str, Any]]:
    if isinstance(final, Run):
        return [(s.name, s.arguments) for s in final.tool_steps()]
    return [(s["name"], s["arguments"]) for s in final["steps"] if s["type"] == "tool"]


def leave_status(stack: Stack, leave_id: str) -> str:
    from mcp_server.leaves import LeaveService
    from mcp_server.storage import Database

    database = Database(stack.mcp_db_url)
    try:
        return LeaveService(database).visible_leave("M001", leave_id).status
    finally:
        database.dispose()


def manager(store: RunStore, model: Any = None, pool: Any = None) -> RunManager:
    """A run manager on `store` with fake tools and a model that answers at once."""
    model = model or AnsweringModel()
    return RunManager(
        pool=pool or FakePool(),
        model=model,
        streaming_model=model,
        config=LoopConfig(),
        store=store,
        metrics=LoopMetrics(),
        max_concurrent_runs=4,
        session_max_messages=10,
    )


_run_numbers = itertools.count(1)


def claim(store: RunStore, session_id: str, user_key: str) -> bool:
    """Whether the user's run starting in the session gets it (begin_run claims it)."""
    record = _run(session_id, user_key, "running")
    return store.sync.begin_run(record, claim_session=True) is not None


def append(store: RunStore, session_id: str, user_key: str, messages: list[Any]) -> bool:
    """Whether the user's run finishing in the session adds `messages` to its history."""
    return store.sync.finish_run(_run(session_id, user_key, "completed"), messages, limit=100)


def _run(session_id: str, user_key: str, status: str) -> RunRecord:
    return RunRecord(
        id=f"run-{next(_run_numbers)}",
        user_key=user_key,
        session_id=session_id,
        status=status,
        input="hi",
    )
