"""An ASGI guard against oversized request headers (uvicorn's httptools parser has no limit)."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send


class HeaderSizeLimit:
    """Answers 431 when a request's header fields add up to more than `max_bytes`, before the
    app (and whatever it would forward the headers to) sees them."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            size = sum(len(name) + len(value) + 4 for name, value in scope["headers"])
            if size > self.max_bytes:
                body = json.dumps(
                    {"detail": f"request header fields too large (limit {self.max_bytes} bytes)"}
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 431,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
