"""Answering a request the SDK's bearer check refused (401) with what it really was: the
SDK's auth middleware knows only 401, the verifier behind it knows why."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.types import Message, Send

# (status, JSON body, extra headers) to answer instead of a 401, or None to let it through
Replacement = tuple[int, dict[str, Any], list[tuple[bytes, bytes]]]


def replacing_401(send: Send, replacement: Callable[[], Replacement | None]) -> Send:
    """`send`, but a 401 becomes `replacement()` where that gives one (its own body dropped)."""
    replaced = False

    async def answer(message: Message) -> None:
        nonlocal replaced
        if message["type"] == "http.response.start" and message["status"] == 401:
            instead = replacement()
            if instead is not None:
                replaced = True
                status, payload, headers = instead
                body = json.dumps(payload).encode()
                await send({"type": "http.response.start", "status": status, "headers": [
                    (b"content-type", b"application/json"), *headers,
                    (b"content-length", str(len(body)).encode())]})  # fmt: skip
                await send({"type": "http.response.body", "body": body})
                return
        if replaced and message["type"] == "http.response.body":
            return  # the 401's own body
        await send(message)

    return answer
