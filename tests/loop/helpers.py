"""What the loop's tests share: the demo tokens, `python -m loop` on a free port, running a
run over HTTP and SSE through RunClient (stream_run, StreamedRun on a thread, stream_until,
answer_when_shown for a run another loop took over), and the run manager with fakes."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2

from common.run_client import UNAVAILABLE, RunClient, always
from common.runs_protocol import (
    ConfirmAction,
    ConfirmationRequested,
    Run,
    RunEvent,
    RunFinished,
    RunStarted,
    WaitingConfirmation,
)
from loop.engine import LoopConfig
from loop.metrics import LoopMetrics
from loop.runs import RunManager
from loop.store import RunRecord, RunStore
from ops.services import loop_service as loop_service  # where the tests import it from
from tests.fakes import AnsweringModel, FakePool
from tests.support import wait_until_async

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


# A test's answer to a question, called on a thread of its own with (the run's id, the
# question): an action for the client to send, or None to leave it (answered some other way,
# or not at all).
Asker = Callable[[str, WaitingConfirmation], ConfirmAction | None]
Answering = ConfirmAction | Asker | None


class StreamedRun:
    """A run streamed by RunClient, its questions answered by `answer` (an action for each,
    an Asker, or None: left unanswered), as a person's page holds one open: its events as
    they arrive, the answers given, and how it ended: `final`, or `error` (refused, or the
    stream cut off as its loop went away). `body` is POST /v1/runs's (its input, session_id,
    run_id, confirm). Called, it streams here to the end; `in_background()`, on a thread."""

    def __init__(
        self,
        base: str,
        body: dict[str, Any],
        headers: dict[str, str] = EMPLOYEE,
        answer: Answering = None,
        *,
        timeout: float = 60.0,
        tolerate_gone: bool = False,
    ) -> None:
        self.base, self.body, self.answer = base, body, answer
        self.token = headers["Authorization"].removeprefix("Bearer ")
        self.timeout, self.tolerate_gone = timeout, tolerate_gone
        self.events: list[RunEvent] = []
        self.answers: list[ConfirmAction | None] = []
        self.final: RunFinished | None = None
        self.error: Exception | None = None
        self.over = False
        self.thread: threading.Thread | None = None
        self._changed = threading.Condition()

    def __call__(self) -> None:
        try:
            asyncio.run(self._stream())
        except Exception as error:  # how the stream ended, for the test to judge
            self.error = error
        finally:
            with self._changed:
                self.over = True
                self._changed.notify_all()

    def in_background(self) -> StreamedRun:
        self.thread = threading.Thread(target=self, daemon=True)
        self.thread.start()
        return self

    def wait_for(self, kind: str, timeout: float) -> bool:
        """Whether an event `kind` arrives within `timeout` s (no: the stream ended first)."""
        with self._changed:
            self._changed.wait_for(lambda: self.seen(kind) or self.over, timeout)
            return self.seen(kind)

    def join(self, timeout: float) -> bool:
        """Whether the stream ended within `timeout` s."""
        with self._changed:
            return self._changed.wait_for(lambda: self.over, timeout)

    def seen(self, kind: str) -> bool:
        return any(e.event == kind for e in self.events)

    @property
    def run_id(self) -> str:
        return next((e.id for e in self.events if isinstance(e, RunStarted)), "")

    @property
    def question(self) -> ConfirmationRequested | None:
        """The first question the run asked."""
        return next((e for e in self.events if isinstance(e, ConfirmationRequested)), None)

    async def _stream(self) -> None:
        async with RunClient(self.base, self.token, timeout=self.timeout) as client:
            self.final = await client.run(
                self.body["input"],
                answer=self._decide,
                on_event=self._seen,
                session_id=self.body.get("session_id"),
                run_id=self.body.get("run_id"),
                confirm=self.body.get("confirm"),
                tolerate_gone=self.tolerate_gone,
            )

    def _seen(self, event: RunEvent) -> None:
        with self._changed:
            self.events.append(event)
            self._changed.notify_all()

    async def _decide(self, question: WaitingConfirmation) -> ConfirmAction | None:
        if self.answer is None or isinstance(self.answer, str):
            action = self.answer
        else:
            action = await asyncio.to_thread(self.answer, self.run_id, question)
        self.answers.append(action)
        return action


def stream_run(
    base: str,
    body: dict[str, Any],
    headers: dict[str, str] = EMPLOYEE,
    answer: Answering = None,
    **options: Any,
) -> tuple[list[RunEvent], RunFinished]:
    """Run with SSE, here, to its end; answer each confirmation with `answer` (None = leave it
    unanswered; an Asker decides). Raises what the run's client raised."""
    streamed = StreamedRun(base, body, headers, answer, **options)
    streamed()
    if streamed.error is not None:
        raise streamed.error
    assert streamed.final is not None and streamed.events[-1] is streamed.final
    return streamed.events, streamed.final


def stream_until(
    base: str, body: dict[str, Any], kind: str, headers: dict[str, str] = EMPLOYEE
) -> list[RunEvent]:
    """Start a streamed run and read it up to its first event `kind`, then close the stream
    (the run goes on without a reader; a question stays open): the events so far."""
    token = headers["Authorization"].removeprefix("Bearer ")

    async def read() -> list[RunEvent]:
        seen: list[RunEvent] = []
        async with (
            RunClient(base, token) as client,
            contextlib.aclosing(
                client.events(
                    body["input"], session_id=body.get("session_id"), run_id=body.get("run_id")
                )
            ) as events,
        ):
            async for event in events:
                seen.append(event)
                if event.event == kind:
                    return seen
        raise AssertionError(f"the run finished without {kind}: {[e.event for e in seen]}")

    return asyncio.run(read())


def answer_when_shown(
    base: str,
    run_id: str,
    action: ConfirmAction,
    headers: dict[str, str] = EMPLOYEE,
    *,
    within: float,
    finish_within: float = 60,
) -> tuple[list[WaitingConfirmation], Run]:
    """Wait until the loop at `base` shows the run's question (within `within` s: a loop
    that took the run over shows it again), answer it `action` (ReplyRefused unless it is
    taken), and follow the run to its end. (The questions it showed, the finished run.)"""
    token = headers["Authorization"].removeprefix("Bearer ")

    async def answered() -> tuple[list[WaitingConfirmation], Run]:
        async with RunClient(base, token, timeout=30) as client:
            shown: list[WaitingConfirmation] = []

            async def question_shown() -> bool:
                shown[:] = await _questions(client, run_id)
                return bool(shown)

            await wait_until_async(
                question_shown, within=within, what=f"{base} to show {run_id}'s question"
            )
            await client.reply(run_id, shown[0].confirmation_id, action)
            final = await client.follow(run_id, always(None), seconds=finish_within, every=0.2)
        if final is None:
            raise TimeoutError(f"{run_id} did not finish in {finish_within} s")
        return shown, final

    return asyncio.run(answered())


async def _questions(client: RunClient, run_id: str) -> list[WaitingConfirmation]:
    """The run's open questions; none while its loop is not reached or is restarting."""
    try:
        return (await client.get(run_id)).confirmations or []
    except httpx2.TransportError:
        return []
    except httpx2.HTTPStatusError as error:
        if error.response.status_code in UNAVAILABLE:
            return []
        raise


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
