"""A small HTTP reverse proxy that sends each request to the next of its backends in turn, as
a load balancer without session affinity would, and remembers where each JSON-RPC call went.

`python -m tests.reliability.round_robin_proxy` with PROXY_PORT and PROXY_BACKENDS (comma-
separated base URLs). GET /proxy/health answers when it serves; GET /proxy/routes lists the
routed calls: {"backend": index, "method": ..., "tool": ..., "answers": bool, "status": ...}.
"""

from __future__ import annotations

import itertools
import json
import os
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

# Headers about one hop, not the message (RFC 9110 §7.6.1), and the length httpx recomputes.
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "host",
    "content-length",
}


def describe(body: bytes) -> dict[str, Any]:
    """The JSON-RPC method of a request body, the tool it calls, and whether it carries answers
    to an earlier round's questions (the modern protocol's inputResponses)."""
    try:
        message = json.loads(body)
    except ValueError:
        message = None
    if not isinstance(message, dict):
        return {"method": None, "tool": None, "answers": False}
    params = message.get("params") or {}
    return {
        "method": message.get("method"),
        "tool": params.get("name"),
        "answers": bool(params.get("inputResponses")),
    }


def build_app(backends: list[str]) -> Starlette:
    turn = itertools.cycle(range(len(backends)))
    routes: list[dict[str, Any]] = []
    client = httpx.AsyncClient(timeout=httpx.Timeout(60.0))

    async def forward(request: Request) -> Response:
        index = next(turn)
        body = await request.body()
        url = backends[index] + request.url.path
        if request.url.query:
            url += f"?{request.url.query}"
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP]
        upstream = await client.send(
            client.build_request(request.method, url, headers=headers, content=body),
            stream=True,
        )
        if request.method == "POST":
            routes.append({"backend": index, "status": upstream.status_code, **describe(body)})
        return StreamingResponse(
            upstream.aiter_raw(),
            status_code=upstream.status_code,
            headers={k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP},
            background=BackgroundTask(upstream.aclose),
        )

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def routed(_: Request) -> Response:
        return JSONResponse(routes)

    return Starlette(
        routes=[
            Route("/proxy/health", health),
            Route("/proxy/routes", routed),
            Route("/{path:path}", forward, methods=["GET", "POST", "DELETE"]),
        ]
    )


def main() -> None:
    backends = [b.strip().rstrip("/") for b in os.environ["PROXY_BACKENDS"].split(",")]
    uvicorn.run(
        build_app(backends),
        host="127.0.0.1",
        port=int(os.environ["PROXY_PORT"]),
        log_level="warning",
    )


if __name__ == "__main__":
    main()
