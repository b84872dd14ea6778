"""What the router hands a replica: the loop's request with its API key, its session header
(vLLM checks the key; the hash reads the session) and its W3C trace context (vLLM's span
continues the loop's trace), and every field as it was sent."""

from __future__ import annotations

from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from harness.router import vllm_router
from tests.support import serving_in_thread

ANSWER = {
    "id": "c", "object": "chat.completion", "created": 0, "model": "leave-copilot",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "好"}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}  # fmt: skip


ADDED_DEFAULTS = {
    "stream": False, "logprobs": False, "no_stop_trim": False, "ignore_eos": False,
    "continue_final_message": False, "skip_special_tokens": True, "separate_reasoning": True,
    "stream_reasoning": True, "return_hidden_states": False, "include_reasoning": True,
}  # fmt: skip


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_the_key_the_session_the_trace_and_the_body_reach_the_replica_unchanged(tmp_path):
    seen: list[tuple[dict[str, str], dict[str, Any]]] = []

    async def completions(request: Request) -> Response:
        seen.append((dict(request.headers), await request.json()))
        return JSONResponse(ANSWER)

    async def health(_: Request) -> Response:
        return JSONResponse({})

    replica = Starlette(
        routes=[
            Route("/health", health),
            Route("/v1/chat/completions", completions, methods=["POST"]),
        ]
    )
    body = {"model": "leave-copilot", "messages": [{"role": "user", "content": "查一下"}],
            "tools": [], "temperature": 0.0}  # fmt: skip
    with (
        serving_in_thread(replica, "the recording replica") as worker,
        vllm_router(tmp_path, [worker]) as (router, _),
    ):
        answer = httpx.post(
            f"{router}/v1/chat/completions",
            json=body,
            headers={
                "Authorization": "Bearer sk-site-key",
                "x-session-id": "ses_abc",
                "traceparent": TRACEPARENT,
            },
            timeout=30,
        )
    assert answer.status_code == 200 and answer.json()["choices"] == ANSWER["choices"]
    [(headers, received)] = seen
    assert headers["authorization"] == "Bearer sk-site-key"
    assert headers["x-session-id"] == "ses_abc"
    assert headers["traceparent"] == TRACEPARENT
    # every field as sent; the router (built from SGLang's) parses and re-writes the body, and
    # adds its protocol's defaults, which are vLLM's defaults too (the real-vLLM tier shows
    # the same tool calls and streams through it as without it)
    assert {k: received[k] for k in body} == body
    assert {k: v for k, v in received.items() if k not in body} == ADDED_DEFAULTS
