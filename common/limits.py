"""An ASGI guard against oversized request headers (uvicorn's httptools parser has no limit)."""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

# (request path, status, message) → the JSON body of the refusal, in the app's error shape
RenderError = Callable[[str, int, str], bytes]


def detail_body(path: str, status: int, message: str) -> bytes:
    return json.dumps({"detail": message}).encode()


async def refuse(send: Send, status: int, body: bytes) -> None:
    """Answer and close."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class HeaderSizeLimit:
    """Answers 431 when a request's header fields add up to more than `max_bytes`, before the
    app (and whatever it would forward the headers to) sees them."""

    def __init__(self, app: ASGIApp, max_bytes: int, render: RenderError = detail_body) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.render = render

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            size = sum(len(name) + len(value) + 4 for name, value in scope["headers"])
            if size > self.max_bytes:
                message = f"request header fields too large (limit {self.max_bytes} bytes)"
                await refuse(send, 431, self.render(scope["path"], 431, message))
                return
        await self.app(scope, receive, send)
