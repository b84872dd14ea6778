"""ASGI guards against oversized requests, refused before the app parses them: header fields
(uvicorn's httptools parser has no limit) and bodies."""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# (request path, status, message) → the JSON body of the refusal, in the app's error shape
RenderError = Callable[[str, int, str], bytes]


def detail_body(path: str, status: int, message: str) -> bytes:
    return json.dumps({"detail": message}).encode()


async def refuse(send: Send, status: int, body: bytes) -> None:
    """Answer and close: the rest of the request is not read."""
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


def body_too_large(max_bytes: int) -> str:
    return f"request body too large (limit {max_bytes} bytes)"


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


class BodySizeLimit:
    """Answers 413 when a request's body is larger than `max_bytes`: at once when it declares
    its length (Content-Length), before anything reads it; else (chunked) as soon as the app
    has read more, by raising HTTPException(413) from `receive`, which the app answers as any
    other HTTPException, before it parses a byte. Either way about `max_bytes` at most are held."""

    def __init__(self, app: ASGIApp, max_bytes: int, render: RenderError = detail_body) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.render = render

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = body_too_large(self.max_bytes)
        for name, value in scope["headers"]:
            # a Content-Length that is not one number never gets here: uvicorn refuses it (400)
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await refuse(send, 413, self.render(scope["path"], 413, message))
                return
        received = 0

        async def counted() -> Message:
            nonlocal received
            event = await receive()
            if event["type"] == "http.request":
                received += len(event.get("body", b""))
                if received > self.max_bytes:
                    raise HTTPException(413, message)
            return event

        await self.app(scope, counted, send)
