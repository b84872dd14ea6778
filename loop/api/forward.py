"""A request about a run that another loop replica holds, sent on to that replica.

A run lives in the memory of the loop that runs it: its open questions, the cancel that stops
it, the rest of a chat front end's answer. Without client affinity a person's next request
reaches any replica; the one that receives it asks the run store which live loop holds the
run and where that loop is reached (its LOOP_PEER_URL, kept with its lease), and relays the
request there whole: the same method, path, headers (the person's token among them) and body,
and the holder's response back as it streams. A relayed request is marked, so it is relayed
once at most: the holder answers it as its own even if the run moved on meanwhile.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2
from fastapi import Request
from fastapi.responses import StreamingResponse

from ..runs import RunManager

FORWARDED_HEADER = "x-leave-loop-forwarded"
# Per connection, not per message (RFC 9110 7.6.1): neither passed on nor passed back.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
# Reaching a live peer takes milliseconds; the answer may take as long as the run's next
# model calls, which the holder bounds with its own timeouts.
CONNECT_SECONDS = 3.0


class HolderUnreachable(Exception):
    """The loop holding the run did not take the request: try again shortly (should it have
    stopped, another loop takes its runs over within a third of a lease)."""


def peer_client() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        timeout=httpx2.Timeout(None, connect=CONNECT_SECONDS), follow_redirects=False
    )


async def holder_of(
    request: Request, manager: RunManager, run_id: str, user_key: str
) -> str | None:
    """The URL of the live loop that holds the user's run, when it is not this one and the
    request was not relayed here already."""
    if FORWARDED_HEADER in request.headers:
        return None
    return await manager.holder_url(run_id, user_key)


async def forward(request: Request, holder_url: str, instance_id: str) -> StreamingResponse:
    """The holder's response to this request, streamed back as it comes (raises
    HolderUnreachable when the holder does not take it)."""
    client: httpx2.AsyncClient = request.app.state.peers
    headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
    headers[FORWARDED_HEADER] = instance_id
    url = holder_url.rstrip("/") + request.url.path
    if request.url.query:
        url += f"?{request.url.query}"
    sent = client.build_request(request.method, url, headers=headers, content=await request.body())
    try:
        response = await client.send(sent, stream=True)
    except httpx2.TransportError as error:
        raise HolderUnreachable(f"{type(error).__name__}") from error

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_raw():
                yield chunk
        finally:
            await response.aclose()

    passed = {k: v for k, v in response.headers.items() if k.lower() not in HOP_BY_HOP}
    return StreamingResponse(body(), status_code=response.status_code, headers=passed)
