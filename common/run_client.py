"""The one client of the loop's runs API: start a run, stream its events as the protocol's
models, answer its confirmations by a policy, read a run, list runs, follow a run whose stream
ended early. The terminal client, the demo, the gate and the tests use it.

How a run's conversation goes (the start request, reading the events, asking the policy,
sending its answer, what counts as finished) is common/run_conversation.py's, without I/O;
this client carries it out with httpx2 under asyncio, and the load test's TimedRunClient
(loadtest/client.py) carries out the same conversation on its own timed stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from types import TracebackType
from typing import Any, assert_never

import httpx2

from . import sse
from .run_conversation import (
    Ask,
    Conversation,
    Done,
    Open,
    Read,
    ReplyRefused,
    Request,
    Response,
    Rest,
    RunRefused,
    Send,
    Show,
    StreamEnded,
    always,
    check_reply,
    reply_request,
    start_request,
)
from .runs_protocol import (
    ConfirmAction,
    ConfirmMode,
    Run,
    RunEvent,
    RunFinished,
    RunList,
    RunSummary,
    WaitingConfirmation,
)

__all__ = [
    "UNAVAILABLE",
    "Answer",
    "OnEvent",
    "ReplyRefused",
    "RunClient",
    "RunRefused",
    "StreamEnded",
    "always",
]

# How a client answers a question the run asks: an action, or None to leave it unanswered
# (at once, or awaited: a person asked).
Answer = Callable[[WaitingConfirmation], Awaitable[ConfirmAction | None] | ConfirmAction | None]
OnEvent = Callable[[RunEvent], Awaitable[None] | None]
# A loop that is restarting (or its proxy) answers these; a client following a run waits.
UNAVAILABLE = frozenset({502, 503, 504})


class RunClient:
    """One person's client (their bearer token) of the loop at `base_url`."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: httpx2.Timeout | float = 60.0,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx2.AsyncClient(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> RunClient:
        return self

    async def __aexit__(
        self,
        _type: type[BaseException] | None,
        _error: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def events(
        self,
        text: str,
        *,
        answer: Answer | None = None,
        session_id: str | None = None,
        run_id: str | None = None,
        confirm: ConfirmMode | None = None,
        tolerate_gone: bool = False,
    ) -> AsyncGenerator[RunEvent]:
        """A streamed run's events as they arrive, its questions answered by `answer` (None:
        left unanswered), the last one run.finished (StreamEnded if the stream ended before).
        Stop early inside `contextlib.aclosing`, which closes the stream."""
        conversation = Conversation(
            text, session_id=session_id, run_id=run_id, confirm=confirm, tolerate_gone=tolerate_gone
        )
        async with contextlib.aclosing(self._carry_out(conversation, answer)) as events:
            async for event in events:
                yield event

    async def run(
        self,
        text: str,
        *,
        answer: Answer | None = None,
        on_event: OnEvent | None = None,
        session_id: str | None = None,
        run_id: str | None = None,
        confirm: ConfirmMode | None = None,
        tolerate_gone: bool = False,
    ) -> RunFinished:
        """Stream the run and answer its questions by `answer` (None: leave them unanswered);
        `on_event` sees every event first. The finished run; StreamEnded if the stream ended
        before it. `tolerate_gone`: see `reply`."""
        conversation = Conversation(
            text, session_id=session_id, run_id=run_id, confirm=confirm, tolerate_gone=tolerate_gone
        )
        async with contextlib.aclosing(self._carry_out(conversation, answer)) as events:
            async for event in events:
                if on_event is not None:
                    shown = on_event(event)
                    if shown is not None:
                        await shown
        return conversation.final

    async def _carry_out(
        self, conversation: Conversation, answer: Answer | None
    ) -> AsyncGenerator[RunEvent]:
        """Do what `conversation` asks, on this client's connections; the events it shows."""
        async with contextlib.AsyncExitStack() as scope:
            response: httpx2.Response | None = None
            raws: AsyncGenerator[sse.Event] | None = None
            outcome: Any = None
            while True:
                command = conversation.next(outcome)
                outcome = None
                match command:
                    case Open(request):
                        response = await scope.enter_async_context(
                            self._http.stream(request.method, request.path, json=request.body)
                        )
                        raws = _raw_events(response)
                        scope.push_async_callback(raws.aclose)  # before the response closes
                        outcome = response.status_code
                    case Rest():
                        assert response is not None
                        await response.aread()
                        outcome = response.text
                    case Read():
                        assert raws is not None
                        outcome = await anext(raws, None)
                    case Show(event):
                        yield event
                    case Ask(question):
                        outcome = await _decided(answer, question)
                    case Send(request):
                        outcome = await self._send(request)
                    case Done():
                        return
                    case _:
                        assert_never(command)

    async def _send(self, request: Request) -> Response:
        response = await self._http.request(request.method, request.path, json=request.body)
        return Response(response.status_code, response.text)

    async def reply(
        self,
        run_id: str,
        confirmation_id: str,
        action: ConfirmAction,
        tolerate_gone: bool = False,
        content: dict[str, Any] | None = None,
    ) -> Response:
        """Answer a confirmation; ReplyRefused if the loop does not take it. `tolerate_gone`:
        a 409 (answered already) or a 404 (no loop holds the question now; a restarting one
        takes it over, and following the run asks it again) is not an error."""
        request = reply_request(run_id, confirmation_id, action, content)
        response = await self._send(request)
        check_reply(request, response, tolerate_gone)
        return response

    async def create(
        self,
        text: str,
        *,
        session_id: str | None = None,
        run_id: str | None = None,
        confirm: ConfirmMode | None = None,
    ) -> Run:
        """A run answered whole (not streamed)."""
        request = start_request(
            text, session_id=session_id, run_id=run_id, confirm=confirm, stream=False
        )
        response = await self._http.post(request.path, json=request.body)
        if response.status_code != 200:
            raise RunRefused(response.status_code, response.text, request)
        return Run.model_validate_json(response.content)

    async def get(self, run_id: str) -> Run:
        response = await self._http.get(f"/v1/runs/{run_id}")
        response.raise_for_status()
        return Run.model_validate_json(response.content)

    async def list(self, limit: int = 20) -> list[RunSummary]:
        response = await self._http.get("/v1/runs", params={"limit": limit})
        response.raise_for_status()
        return RunList.model_validate_json(response.content).runs

    async def follow(
        self, run_id: str, answer: Answer, *, seconds: float, every: float = 1.0
    ) -> Run | None:
        """The run as GET shows it, every `every` s, its open questions answered (each once),
        until it ends; None if it still runs after `seconds` (a loop restarting, or not reached
        meanwhile, is waited for)."""
        asked: set[str] = set()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                response = await self._http.get(f"/v1/runs/{run_id}")
            except httpx2.TransportError:
                response = None
            if response is not None and response.status_code not in UNAVAILABLE:
                response.raise_for_status()
                run = Run.model_validate_json(response.content)
                if run.status != "running":
                    return run
                for question in run.confirmations or []:
                    if question.confirmation_id not in asked:
                        asked.add(question.confirmation_id)
                        action = await _decided(answer, question)
                        if action is not None:
                            await self.reply(run_id, question.confirmation_id, action, True)
            await asyncio.sleep(every)
        return None


async def _decided(answer: Answer | None, question: WaitingConfirmation) -> ConfirmAction | None:
    if answer is None:
        return None
    decided = answer(question)
    return await decided if inspect.isawaitable(decided) else decided


async def _raw_events(response: httpx2.Response) -> AsyncGenerator[sse.Event]:
    parser = sse.Parser()
    async for chunk in response.aiter_bytes():
        for raw in parser.feed(chunk):
            yield raw
