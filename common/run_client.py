"""The one client of the loop's runs API: start a run, stream its events as the protocol's
models, answer its confirmations by a policy, read a run, list runs, follow a run whose stream
ended early. The terminal client, the demo, the gate and the tests use it (the load test reads
the same events with its own timed transport: loadtest/client.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any, assert_never

import httpx2

from . import sse
from .runs_protocol import (
    AnswerDelta,
    ConfirmAction,
    ConfirmationRequested,
    ConfirmationResolved,
    ConfirmMode,
    Detection,
    ModelFinished,
    ModelStarted,
    Run,
    RunEvent,
    RunFinished,
    RunList,
    RunStarted,
    RunSummary,
    ToolFinished,
    ToolStarted,
    WaitingConfirmation,
    parse_event,
)

# How a client answers a question the run asks: an action, or None to leave it unanswered.
Answer = Callable[[WaitingConfirmation], Awaitable[ConfirmAction | None]]
OnEvent = Callable[[RunEvent], Awaitable[None] | None]
# A loop that is restarting (or its proxy) answers these; a client following a run waits.
UNAVAILABLE = frozenset({502, 503, 504})


def always(action: ConfirmAction | None) -> Answer:
    """The policy that answers every question alike (None: none is answered)."""

    async def answer(_question: WaitingConfirmation) -> ConfirmAction | None:
        return action

    return answer


class RunRefused(Exception):
    """The loop did not start the run (an error status)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"the loop answered {status}: {text[:200]}")
        self.status, self.text = status, text


class StreamEnded(Exception):
    """The stream ended before run.finished (its loop stopped): follow the run by its id."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"the stream of run {run_id or '?'} ended without run.finished")
        self.run_id = run_id


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
        session_id: str | None = None,
        run_id: str | None = None,
        confirm: ConfirmMode | None = None,
    ) -> AsyncIterator[RunEvent]:
        """A streamed run's events as they arrive; events this client does not know are
        skipped (a newer server's)."""
        body = _body(text, session_id, run_id, confirm, stream=True)
        async with self._http.stream("POST", "/v1/runs", json=body) as response:
            if response.status_code != 200:
                await response.aread()
                raise RunRefused(response.status_code, response.text)
            parser = sse.Parser()
            async for chunk in response.aiter_bytes():
                for raw in parser.feed(chunk):
                    event = parse_event(raw.event, raw.data)
                    if event is not None:
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
        started = run_id or ""
        async for event in self.events(text, session_id=session_id, run_id=run_id, confirm=confirm):
            if on_event is not None:
                shown = on_event(event)
                if shown is not None:
                    await shown
            match event:
                case RunStarted():
                    started = event.id
                case ConfirmationRequested():
                    if answer is not None:
                        action = await answer(event)
                        if action is not None:
                            await self.reply(started, event.confirmation_id, action, tolerate_gone)
                case RunFinished():
                    return event
                case (
                    ModelStarted()
                    | AnswerDelta()
                    | ModelFinished()
                    | ToolStarted()
                    | ToolFinished()
                    | Detection()
                    | ConfirmationResolved()
                ):
                    pass
                case _:
                    assert_never(event)
        raise StreamEnded(started)

    async def reply(
        self,
        run_id: str,
        confirmation_id: str,
        action: ConfirmAction,
        tolerate_gone: bool = False,
        content: dict[str, Any] | None = None,
    ) -> httpx2.Response:
        """Answer a confirmation. `tolerate_gone`: a 409 (answered already) or a 404 (no loop
        holds the question now; a restarting one takes it over, and following the run asks it
        again) is not an error."""
        body: dict[str, Any] = {"action": action}
        if content is not None:
            body["content"] = content
        path = f"/v1/runs/{run_id}/confirmations/{confirmation_id}"
        response = await self._http.post(path, json=body)
        if not (tolerate_gone and response.status_code in (404, 409)):
            response.raise_for_status()
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
        response = await self._http.post(
            "/v1/runs", json=_body(text, session_id, run_id, confirm, stream=False)
        )
        if response.status_code != 200:
            raise RunRefused(response.status_code, response.text)
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
                        action = await answer(question)
                        if action is not None:
                            await self.reply(run_id, question.confirmation_id, action, True)
            await asyncio.sleep(every)
        return None


def _body(
    text: str,
    session_id: str | None,
    run_id: str | None,
    confirm: ConfirmMode | None,
    *,
    stream: bool,
) -> dict[str, Any]:
    body: dict[str, Any] = {"input": text, "stream": stream}
    for name, value in (("session_id", session_id), ("run_id", run_id), ("confirm", confirm)):
        if value is not None:
            body[name] = value
    return body
