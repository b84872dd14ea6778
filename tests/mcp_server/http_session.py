"""The MCP server over real HTTP, as the tests that start it reach it: an SDK client session
acting as one token's person, and the raw initialize request for probes below the SDK."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from .helpers import Elicitations

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@asynccontextmanager
async def session(
    url: str,
    token: str,
    mode: str,
    elicitations: Elicitations | None = None,
    headers: dict[str, str] | None = None,
) -> AsyncIterator[Client]:
    """`headers`: more on every request (a front end names the person it acts for)."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}", **(headers or {})}) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode=mode,
            elicitation_callback=elicitations or Elicitations(),
            read_timeout_seconds=30,
        ) as client,
    ):
        yield client
