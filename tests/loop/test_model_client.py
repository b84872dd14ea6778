"""What the model client sends: the OpenAI chat completions request, whole or streamed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from common import sse
from loop.model import OpenAIChatModel, current_session
from tests.support import serving_in_thread

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_leaves",
            "description": "Search leaves.",
            "parameters": {"type": "object", "properties": {"keyword": {"type": "string"}}},
        },
    }
]
MESSAGES = [
    {"role": "system", "content": "你是請假助理。"},
    {"role": "user", "content": "查一下我那張家庭旅遊的假"},
]
USAGE = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}


class Recorded:
    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []

    async def completions(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append((dict(request.headers), body))
        if not body.get("stream"):
            return JSONResponse({"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": "好"}}],
                                 "usage": USAGE})  # fmt: skip

        def events() -> Iterator[bytes]:
            for delta, usage in (({"role": "assistant", "content": "好"}, None), ({}, USAGE)):
                chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                         "choices": [] if usage else [{"index": 0, "delta": delta,
                                                       "finish_reason": None}],
                         "usage": usage}  # fmt: skip
                yield sse.frame(chunk)
            yield sse.DONE_FRAME

        return StreamingResponse(events(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def model_server() -> Iterator[tuple[str, Recorded]]:
    recorded = Recorded()
    app = Starlette(routes=[Route("/v1/chat/completions", recorded.completions, methods=["POST"])])
    with serving_in_thread(app, "the recording model server") as base:
        yield f"{base}/v1", recorded


@pytest.mark.parametrize("stream", [False, True])
async def test_the_request_is_the_chat_completions_request_with_the_api_key(model_server, stream):
    base_url, recorded = model_server
    recorded.requests.clear()
    model = OpenAIChatModel(
        base_url=base_url, model="leave-copilot", api_key="sk-site", max_tokens=256, stream=stream
    )
    try:
        reply = await model.complete(MESSAGES, TOOLS)
    finally:
        await model.close()
    assert reply.message["content"] == "好"
    assert (reply.prompt_tokens, reply.completion_tokens) == (11, 3)
    [(headers, body)] = recorded.requests
    assert headers["authorization"] == "Bearer sk-site"
    assert headers["content-type"] == "application/json"
    expected: dict[str, Any] = {
        "model": "leave-copilot",
        "messages": MESSAGES,
        "tools": TOOLS,
        "temperature": 0.0,
        "max_tokens": 256,
    }
    if stream:
        expected |= {"stream": True, "stream_options": {"include_usage": True}}
    assert body == expected
    assert "x-session-id" not in headers  # a call outside any run names no session


@pytest.mark.parametrize("stream", [False, True])
async def test_a_call_names_the_session_of_the_run_that_makes_it(model_server, stream):
    """vLLM's router hashes x-session-id to keep a session's turns on one replica."""
    base_url, recorded = model_server
    recorded.requests.clear()
    model = OpenAIChatModel(base_url=base_url, model="m", api_key="k", stream=stream)

    async def run_of(session: str) -> None:
        current_session.set(session)  # as the run manager does, in the run's own task
        await model.complete(MESSAGES, TOOLS)

    try:
        await asyncio.gather(run_of("ses_a"), run_of("ses_b"))
        await model.complete(MESSAGES, TOOLS)
    finally:
        await model.close()
    sessions = [headers.get("x-session-id") for headers, _ in recorded.requests]
    assert sorted(sessions[:2]) == ["ses_a", "ses_b"] and sessions[2] is None


class CutOff:
    """A model whose streamed turn stops before its end: no finish_reason, and no [DONE]
    (`done` true: ended with [DONE], as a server that says it is finished does)."""

    def __init__(self, delta: dict[str, Any], done: bool = False) -> None:
        self.delta, self.done, self.calls = delta, done, 0

    async def completions(self, _request: Request) -> Response:
        self.calls += 1

        def events() -> Iterator[bytes]:
            yield sse.frame({"id": "c", "object": "chat.completion.chunk", "created": 0,
                             "model": "m", "choices": [{"index": 0, "delta": self.delta,
                                                        "finish_reason": None}]})  # fmt: skip
            if self.done:
                yield sse.DONE_FRAME

        return StreamingResponse(events(), media_type="text/event-stream")


CALL = {"index": 0, "id": "call_1", "type": "function",
        "function": {"name": "search_leaves", "arguments": '{"keyword": "婚禮"}'}}  # fmt: skip


@pytest.mark.parametrize(
    ("delta", "done", "calls", "raised"),
    [
        # nothing of it reached the person yet: asked again, as after a lost connection
        ({"tool_calls": [CALL]}, False, 3, "connection_error after 3 attempts"),
        # half an answer was passed on: asking again would pass it on twice
        ({"content": "好的，這是"}, False, 1, "the model's stream stopped midway through its"),
        # ended by [DONE]: whole, whatever its last chunk said
        ({"content": "好的"}, True, 1, None),
    ],
)
async def test_a_stream_that_stops_midway_is_never_taken_for_a_whole_turn(
    delta, done, calls, raised
):
    from loop.engine import ModelError

    cut = CutOff(delta, done)
    app = Starlette(routes=[Route("/v1/chat/completions", cut.completions, methods=["POST"])])
    sent: list[str] = []

    async def on_text(text: str) -> None:
        sent.append(text)

    with serving_in_thread(app, "a model whose stream stops midway") as base:
        model = OpenAIChatModel(
            base_url=f"{base}/v1", model="m", api_key="k", stream=True,
            max_retries=2, backoff_seconds=0.01,
        )  # fmt: skip
        try:
            if raised is None:
                reply = await model.complete(MESSAGES, TOOLS, on_text)
                assert reply.message["content"] == "好的" and sent == ["好的"]
            else:
                with pytest.raises(ModelError, match=raised):
                    await model.complete(MESSAGES, TOOLS, on_text)
        finally:
            await model.close()
    assert cut.calls == calls
