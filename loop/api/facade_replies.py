"""What one chat completion of the facade says, and how it goes out: whole (JSON) or as
`chat.completion.chunk` events. A reply is the model's text (what `stop` may cut) and then the
facade's own (a confirmation's question, a run's status), never cut."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, assert_never

from fastapi.responses import JSONResponse, Response, StreamingResponse

from common import sse
from common.runs_protocol import (
    AnswerDelta,
    ConfirmationRequested,
    ConfirmationResolved,
    Detection,
    ModelFinished,
    ModelStarted,
    RunFinished,
    RunStarted,
    RunStatus,
    ToolFinished,
    ToolStarted,
)

from ..engine import ModelError
from ..model import OpenAIChatModel, current_session
from ..runs import ActiveRun, RunNotRecorded
from .errors import openai_error
from .facade_confirm import question_text
from .facade_params import StopCut

# The end of a run whose stream ended without it: the loop stopped while the run waited.
STOPPED_TEXT = "（這次的執行因為服務停止而中斷；重新啟動後可以再回覆或查詢。）"


@dataclass
class Ending:
    """How a completion ends, known once its model text has been read."""

    finish_reason: str = "stop"
    tail: str = ""  # the facade's own text, after the model's
    prompt_tokens: int = 0
    completion_tokens: int = 0
    run: dict[str, Any] | None = None  # which run, and where it stands
    recorded: bool = True  # False: the run store could not record the run (it did not run)
    error: str | None = None  # the model could not answer (a housekeeping request)


class Reply:
    """A completion's content: `texts()` yields the model's text, then `ending` holds the rest."""

    run_id: str | None = None

    def __init__(self) -> None:
        self.ending = Ending()

    async def texts(self) -> AsyncIterator[str]:
        return
        yield  # an async generator that yields nothing

    def release(self) -> None:
        """Called once the completion has gone out (or its client went away)."""


class FixedReply(Reply):
    """The facade's own words: a question asked again, what became of an earlier one."""

    def __init__(self, text: str, run: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.ending.tail = text
        self.ending.run = run
        self.run_id = run["id"] if run else None


class RunReply(Reply):
    """A run's events, read until it finishes or asks a confirmation: one reader at a time (two
    would split the events between them), and the events stay queued for the next reader —
    the request that brings the person's answer."""

    def __init__(self, run: ActiveRun, confirmation_timeout: float) -> None:
        super().__init__()
        self.run = run
        self.run_id = run.id
        self.timeout = confirmation_timeout
        run.read_by_facade = True
        run.streamed = True  # a run taken over after a restart queues its events from here

    def release(self) -> None:
        self.run.read_by_facade = False

    async def texts(self) -> AsyncIterator[str]:
        # Answer text is only known to be the answer once its turn ends without tool calls:
        # each model turn's text is held and released when that turn is the last.
        held: list[str] = []
        released = False
        while (event := await self.run.events.get()) is not None:
            match event:
                case RunFinished():
                    if event.status == RunStatus.COMPLETED and event.answer and not released:
                        yield event.answer  # a run of the whole-answer model streams no text
                    self._finished(event, released)
                    return
                case ConfirmationRequested():
                    pending = self.run.confirmations.get(event.confirmation_id)
                    if pending is not None and not pending.answer.done():  # not answered yet
                        self.ending.tail = question_text(self.run.id, pending, self.timeout)
                        self.ending.run = {"id": self.run.id, "status": "running"}
                        self.ending.run["confirmation_id"] = pending.id
                        return
                case ModelStarted():
                    held = []
                case AnswerDelta():
                    held.append(event.text)
                case ModelFinished():
                    step = event.step
                    if step is None:  # a model call that failed: what it wrote is no answer
                        held = []
                        continue
                    self.ending.prompt_tokens += step.prompt_tokens
                    self.ending.completion_tokens += step.completion_tokens
                    if not (step.result or {}).get("tool_calls"):
                        for text in held:
                            yield text
                        released = released or bool(held)
                        held = []
                case (
                    RunStarted()
                    | ToolStarted()
                    | ToolFinished()
                    | Detection()
                    | ConfirmationResolved()
                ):
                    pass  # the facade shows the answer only
                case _:
                    assert_never(event)
        self.ending.tail, self.ending.finish_reason = STOPPED_TEXT, "length"

    def _finished(self, event: RunFinished, released: bool) -> None:
        ending = self.ending
        completed = event.status == RunStatus.COMPLETED
        if not completed or not (event.answer or released):
            ending.tail = event.answer or f"（執行未完成：{event.status}，{event.reason or ''}）"
        ending.finish_reason = "stop" if completed else "length"
        ending.run = {"id": event.id, "status": event.status, "turns": event.turns}
        ending.recorded = self.run.stored


class TaskReply(Reply):
    """A housekeeping request: the messages straight to the model, without tools."""

    def __init__(
        self,
        model: OpenAIChatModel,
        messages: list[dict[str, Any]],
        session: str | None,
    ) -> None:
        super().__init__()
        self.model = model
        self.messages = messages
        self.session = session

    async def texts(self) -> AsyncIterator[str]:
        pieces: asyncio.Queue[str | None] = asyncio.Queue()
        streamed = False

        async def on_text(text: str) -> None:
            nonlocal streamed
            streamed = True
            await pieces.put(text)

        async def complete() -> str:
            current_session.set(self.session)  # a conversation's prompts stay on one replica
            try:
                reply = await self.model.complete(self.messages, [], on_text)
            finally:
                await pieces.put(None)
            self.ending.finish_reason = reply.finish_reason
            self.ending.prompt_tokens = reply.prompt_tokens
            self.ending.completion_tokens = reply.completion_tokens
            return str(reply.message.get("content") or "")

        call = asyncio.create_task(complete())
        try:
            while (text := await pieces.get()) is not None:
                yield text
            answer = await call
        except ModelError as error:
            self.ending.error = f"the model could not answer: {error}"
            return
        finally:
            call.cancel()
        if not streamed:  # the whole-answer model calls on_text with nothing
            yield answer


@dataclass
class Completion:
    """One completion's frame: its id, model and the headers it goes out with."""

    model: str
    headers: dict[str, str] = field(default_factory=dict)
    stop: str | list[str] | None = None
    include_usage: bool = False
    id: str = field(default_factory=lambda: f"chatcmpl-{secrets.token_hex(8)}")
    created: int = field(default_factory=lambda: int(time.time()))

    def headers_for(self, reply: Reply) -> dict[str, str]:
        if reply.run_id is None:
            return self.headers
        return {**self.headers, "X-Leave-Run-Id": reply.run_id}


async def whole(completion: Completion, reply: Reply) -> Response:
    """The completion as one chat.completion object."""
    cut = StopCut(completion.stop)
    try:
        text = "".join([cut.feed(t) async for t in reply.texts()]) + cut.finish()
    finally:
        reply.release()
    ending = reply.ending
    if ending.error is not None:
        return openai_error(503, ending.error, None)
    if not ending.recorded:
        return openai_error(503, RunNotRecorded.message, None)
    body: dict[str, Any] = {
        "id": completion.id,
        "object": "chat.completion",
        "created": completion.created,
        "model": completion.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": _joined(text, ending.tail)},
                "finish_reason": ending.finish_reason,
            }
        ],
        "usage": _usage(ending),
    }
    if ending.run is not None:
        body["run"] = ending.run
    return JSONResponse(body, headers=completion.headers_for(reply))


def streamed(completion: Completion, reply: Reply) -> Response:
    return StreamingResponse(
        _chunks(completion, reply),
        media_type="text/event-stream",
        headers=completion.headers_for(reply),
    )


async def _chunks(completion: Completion, reply: Reply) -> AsyncIterator[bytes]:
    head = {
        "id": completion.id,
        "object": "chat.completion.chunk",
        "created": completion.created,
        "model": completion.model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return sse.frame({**head, "choices": [choice]})

    cut = StopCut(completion.stop)
    sent = ""
    try:
        yield chunk({"role": "assistant", "content": ""})
        async for text in reply.texts():
            if piece := cut.feed(text):
                sent += piece
                yield chunk({"content": piece})
        ending = reply.ending
        rest = cut.finish()
        tail = _joined(sent + rest, ending.tail)[len(sent) :]
        if tail:
            yield chunk({"content": tail})
        if ending.error is not None:  # what OpenAI's own streams send, and its clients raise
            yield sse.frame({"error": {"message": ending.error, "type": "ServiceUnavailableError"}})
        else:
            yield chunk({}, ending.finish_reason)
        if completion.include_usage:
            yield sse.frame({**head, "choices": [], "usage": _usage(ending)})
        yield sse.DONE_FRAME
    finally:
        reply.release()


def _joined(text: str, tail: str) -> str:
    """The model's text and the facade's, a blank line apart when there are both."""
    return f"{text}\n\n{tail}" if text and tail else text or tail


def _usage(ending: Ending) -> dict[str, int]:
    return {
        "prompt_tokens": ending.prompt_tokens,
        "completion_tokens": ending.completion_tokens,
        "total_tokens": ending.prompt_tokens + ending.completion_tokens,
    }
