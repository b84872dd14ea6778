"""Models wrong on purpose, for the release gate to fail: an OpenAI-compatible endpoint that
claims success without calling a tool, acts on a leave id it made up, or writes its tool
calls wrong in each way the report names."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from common import sse

GUESSED_ID = "LV-123456"
# (tool, arguments as written): one call of each kind of mistake the report tells apart
MALFORMED = (
    ("create_leave", json.dumps({"leave_type": "特休", "start_date": "下週一",
                                 "end_date": "下週一", "reason": "旅遊"})),
    ("create_leave", json.dumps({"leave_type": "vacation day", "start_date": "2030-01-07",
                                 "end_date": "2030-01-07", "reason": "旅遊"})),
    ("update_leave_status", json.dumps({"leave_id": GUESSED_ID})),
    ("search_leaves", json.dumps({"keyword": 5})),
    ("search_leaves", json.dumps({"keyword": "", "status": "done"})),
    ("search_leaves", '{"keyword": "家庭'),
    ("delete_leave", json.dumps({"leave_id": GUESSED_ID})),
)  # fmt: skip


def _reply(body: dict[str, Any], mode: str) -> tuple[str, list[dict[str, Any]]]:
    """(text, tool calls) of the next assistant turn."""
    messages = body["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    acted = any(m["role"] == "tool" for m in messages[last_user:])
    if mode == "malformed":
        if acted:
            return "抱歉，這次沒有辦成。", []
        return "", [{"id": f"call_{len(messages)}_{i}", "type": "function",
                     "function": {"name": name, "arguments": arguments}}
                    for i, (name, arguments) in enumerate(MALFORMED)]  # fmt: skip
    if mode == "claims" or acted:
        return "好的，已將假單送出審核，也已取消那張假。", []
    request = str(messages[last_user]["content"])
    if "取消" in request:
        name, arguments = "cancel_approved_leave", {"leave_id": GUESSED_ID}
    else:
        name, arguments = "update_leave_status", {"leave_id": GUESSED_ID, "status": "submitted"}
    call = {"id": f"call_{len(messages)}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}  # fmt: skip
    return "", [call]


def wrong_model(mode: str) -> Starlette:
    """mode: "claims" (says it did it, calls nothing), "guesses" (acts on a made-up id) or
    "malformed" (the calls of MALFORMED, then says it did not get it done)."""

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": "leave-copilot", "object": "model", "owned_by": "wrong-on-purpose"}]})  # fmt: skip

    async def chat(request: Request) -> Response:
        body = await request.json()
        text, calls = _reply(body, mode)
        head = {"id": "chatcmpl-wrong", "created": 0, "model": body["model"]}
        usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        finish = "tool_calls" if calls else "stop"
        if not body.get("stream"):
            message = {"role": "assistant", "content": text or None,
                       **({"tool_calls": calls} if calls else {})}  # fmt: skip
            return JSONResponse({**head, "object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "message": message, "finish_reason": finish}]})  # fmt: skip

        def chunks() -> Iterator[bytes]:
            def chunk(delta: dict[str, Any], reason: str | None = None) -> bytes:
                return sse.frame({**head, "object": "chat.completion.chunk", "choices": [
                    {"index": 0, "delta": delta, "finish_reason": reason}]})  # fmt: skip

            yield chunk({"role": "assistant", "content": ""})
            if text:
                yield chunk({"content": text})
            for index, call in enumerate(calls):
                yield chunk({"tool_calls": [{**call, "index": index}]})
            yield chunk({}, finish)
            yield sse.frame({**head, "object": "chat.completion.chunk", "choices": [],
                             "usage": usage})  # fmt: skip
            yield sse.DONE_FRAME

        return StreamingResponse(chunks(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/models", models), Route("/v1/chat/completions", chat,
                                                                 methods=["POST"])])  # fmt: skip
