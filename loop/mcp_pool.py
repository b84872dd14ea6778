"""Long-lived MCP clients, one per user token (a front end's with the person it acts for:
acting_for.py), reused across runs.

Each connection is owned by one task that enters and exits the SDK's context managers (anyio
requires that); runs call tools on it from their own tasks, which the SDK allows. The tool list
is cached per connection and refreshed when the server announces a change or the connection is
re-established. A dead connection is dropped and re-opened on next use, so a restarted MCP server
costs one failed call, not a restart of the loop.

Confirmations (MCP elicitation) are routed to the run that made the call through a context
variable: in the modern protocol era the SDK answers the server's input request inside the
caller's task tree, so the variable set around `call_tool` is visible in the callback.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
from mcp import Client, MCPError
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ElicitRequestParams, ElicitResult, Tool
from opentelemetry import propagate

from common.credentials import hash_token

from .acting_for import ACTING_FOR_HEADER, parts
from .engine import ToolInfo, ToolResult

logger = logging.getLogger(__name__)

ConfirmHandler = Callable[[str, dict[str, Any]], Awaitable[ElicitResult]]
# Set by the run around each tool call; read by the elicitation callback.
current_confirm_handler: contextvars.ContextVar[ConfirmHandler | None] = contextvars.ContextVar(
    "current_confirm_handler", default=None
)


# HTTP-level read timeout of an MCP connection: a call's response (and the server's event
# stream) may stay quiet for as long as a tool or a confirmation takes; the loop bounds calls
# with its own timeouts. (httpx2's default of 5 s would drop the connection under a slow tool.)
MIN_HTTP_READ_TIMEOUT = 300.0

# What the SDK says when the transport, not the server's logic, failed.
TRANSPORT_FAILURES = {
    "Connection closed",
    "Server returned an error response",
    "Session terminated",
}


class McpUnauthorized(Exception):
    """The MCP server refused the user's token (HTTP 401)."""


class McpForbidden(McpUnauthorized):
    """The MCP server took the token but not for the person named with it (HTTP 403: a front
    end's credential naming no one or someone unknown, a person's own token naming another);
    the message is the server's reason, which the caller may know."""


class McpUnavailable(Exception):
    """The MCP server could not be reached, the connection broke, or the server said it is
    unavailable (503: e.g. it cannot check sign-ins while the identity provider's keys are
    stale); `retry_after` is its Retry-After in seconds when it gave one."""

    def __init__(self, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def tool_info(tool: Tool) -> ToolInfo:
    """An MCP tool as the loop offers it to the model."""
    annotations = tool.annotations
    return ToolInfo(
        tool.name,
        tool.description or "",
        {k: v for k, v in tool.input_schema.items() if k != "title"},
        needs_confirmation=bool(annotations and annotations.destructive_hint),
        read_only=bool(annotations and annotations.read_only_hint),
    )


class McpConnection:
    def __init__(
        self, url: str, token: str, *, connect_timeout: float, read_timeout: float
    ) -> None:
        self.url = url
        self._token = token
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._client: Client | None = None
        self._tools: list[ToolInfo] | None = None
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._error: BaseException | None = None
        self._owner: asyncio.Task[None] | None = None
        self._refused = False  # the server answered 401: the token is not (or no longer) valid
        self._forbidden: str | None = None  # the server's reason for a 403 (McpForbidden)
        # the server's last answer was 503 (a 2xx clears it), and the Retry-After it gave
        self._unavailable = False
        self._retry_after: int | None = None
        self._broken = False
        self.last_used = time.monotonic()
        self.verified_at = time.monotonic()  # when the server last accepted the token

    @property
    def alive(self) -> bool:
        return (
            self._owner is not None
            and not self._owner.done()
            and self._client is not None
            and not self._broken
        )

    async def open(self) -> None:
        self._owner = asyncio.create_task(self._own(), name=f"mcp-connection {self.url}")
        ready = asyncio.create_task(self._ready.wait())
        try:
            await asyncio.wait(
                [ready, self._owner],
                timeout=self._connect_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            ready.cancel()
        if self._client is None:
            await self.close()
            if self._forbidden is not None:
                raise McpForbidden(self._forbidden)
            if self._refused:
                raise McpUnauthorized("the MCP server refused the token")
            if self._unavailable:
                raise self._said_unavailable()
            raise McpUnavailable(f"cannot connect to the MCP server: {_describe(self._error)}")

    async def _own(self) -> None:
        token, person = parts(self._token)
        headers = {"Authorization": f"Bearer {token}"}
        if person is not None:  # on every request: the server decides each time who acts
            headers[ACTING_FOR_HEADER] = person

        async def send_trace_context(request: httpx2.Request) -> None:
            # The MCP SDK sends it in the request's `_meta` too (SEP-414); the header is for
            # whatever stands in front of the server, and servers that read only headers.
            # Its POSTs run in the calling task's context, inside its `MCP send` span.
            propagate.inject(request.headers)

        async def watch_status(response: httpx2.Response) -> None:
            # The SDK turns HTTP errors into a generic JSON-RPC error; keep the 401 apart.
            if response.status_code == 401:
                self._refused = True
            elif response.status_code == 403:
                self._forbidden = await _refusal(response)
            elif response.status_code == 503:
                self._unavailable = True
                self._retry_after = _seconds(response.headers.get("retry-after"))
            elif response.is_success:
                self._unavailable = False

        try:
            async with (
                httpx2.AsyncClient(
                    headers=headers,
                    event_hooks={"request": [send_trace_context], "response": [watch_status]},
                    timeout=httpx2.Timeout(
                        self._connect_timeout,
                        read=max(MIN_HTTP_READ_TIMEOUT, self._read_timeout + 30),
                    ),
                ) as http,
                Client(
                    streamable_http_client(self.url, http_client=http),
                    elicitation_callback=self._on_elicit,
                    message_handler=self._on_message,
                    read_timeout_seconds=self._read_timeout,
                ) as client,
            ):
                self._client = client
                self._ready.set()
                await self._closing.wait()
        except BaseException as error:  # recorded; the owner task just ends
            self._error = error
            if not isinstance(error, asyncio.CancelledError):
                logger.info("MCP connection ended: %s", _describe(error))
        finally:
            self._client = None

    async def close(self) -> None:
        self._closing.set()
        if self._owner is not None and not self._owner.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._owner), timeout=5)
            except (TimeoutError, asyncio.CancelledError):
                self._owner.cancel()

    async def reverify(self) -> None:
        """Ask the server whether it still takes the token: a token revoked, expired or of
        someone who left is found out here. The ask is a tool listing (ping is gone from the
        modern protocol), which carries the token as every request does and refreshes the
        tools it lists."""
        client = self._require()
        try:
            listed = await asyncio.wait_for(client.list_tools(), self._connect_timeout)
        except MCPError as error:
            self._broken = True
            raise self._failure(error) or self._lost(error) from error
        except TimeoutError as error:
            self._broken = True
            raise McpUnavailable("the MCP server did not answer in time") from error
        self._tools = [tool_info(t) for t in listed.tools]
        self.verified_at = time.monotonic()

    async def tools(self) -> list[ToolInfo]:
        if self._tools is None:
            client = self._require()
            try:
                listed = await asyncio.wait_for(client.list_tools(), self._read_timeout)
            except MCPError as error:
                failure = self._failure(error)
                if failure is None:
                    raise
                raise failure from error
            self._tools = [tool_info(t) for t in listed.tools]
        return self._tools

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Call a tool; a broken transport marks this connection dead and raises."""
        client = self._require()
        self.last_used = time.monotonic()
        try:
            result = await client.call_tool(name, arguments)
        except MCPError as error:
            failure = self._failure(error)
            if failure is None:
                raise
            raise failure from error
        text = "\n".join(getattr(block, "text", "") for block in result.content)
        return ToolResult(text, bool(result.is_error), result.structured_content)

    def _failure(self, error: MCPError) -> McpUnauthorized | McpUnavailable | None:
        """What an MCP error says of the connection: the token refused (401), the server
        unavailable (503), the transport broken; None for an error of the call itself."""
        if self._forbidden is not None:
            self._broken = True
            return McpForbidden(self._forbidden)
        if self._refused:
            self._broken = True
            return McpUnauthorized("the MCP server refused the token")
        if self._unavailable:
            return self._said_unavailable()
        if error.error.message in TRANSPORT_FAILURES:
            self._broken = True
            return self._lost(error)
        return None

    def _said_unavailable(self) -> McpUnavailable:
        return McpUnavailable("the MCP server answered 503 (unavailable)", self._retry_after)

    @staticmethod
    def _lost(error: MCPError) -> McpUnavailable:
        return McpUnavailable(f"MCP connection lost: {error.error.message}")

    def _require(self) -> Client:
        if self._client is None:
            raise McpUnavailable(f"MCP connection is closed: {_describe(self._error)}")
        return self._client

    async def _on_elicit(
        self, context: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult:
        handler = current_confirm_handler.get()
        if handler is None:  # no run to ask: never confirm a destructive action by default
            return ElicitResult(action="decline")
        schema = getattr(params, "requested_schema", None) or {}
        return await handler(params.message, dict(schema))

    async def _on_message(self, message: Any) -> None:
        method = getattr(getattr(message, "root", message), "method", None)
        if method == "notifications/tools/list_changed":
            self._tools = None


class McpPool:
    """One live `McpConnection` per user token; opened on first use, re-opened when dead."""

    def __init__(
        self,
        url: str,
        *,
        connect_timeout: float = 10.0,
        read_timeout: float = 30.0,
        idle_seconds: float = 600.0,
        max_connections: int = 1000,
        recheck_seconds: float = 30.0,
    ) -> None:
        self.url = url
        # An open connection's token is taken on trust this long after the server last
        # accepted it; then asked about again, so a revoked one stops working within it.
        self._recheck_seconds = recheck_seconds
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._idle_seconds = idle_seconds
        self._max = max_connections
        self._connections: dict[str, McpConnection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.connects = 0  # for metrics and the benchmark

    def _trusted(self, connection: McpConnection | None) -> bool:
        return (
            connection is not None
            and connection.alive
            and time.monotonic() - connection.verified_at < self._recheck_seconds
        )

    def has_open(self, token: str) -> bool:
        """True when this token has a live connection the server accepted recently."""
        return self._trusted(self._connections.get(hash_token(token)))

    def forget(self, token: str) -> None:
        """Stop trusting the token's connection (the server refused it): the next request
        with it asks the server again. The connection is closed when next evicted."""
        connection = self._connections.get(hash_token(token))
        if connection is not None:
            connection.verified_at = float("-inf")

    async def connection(self, token: str) -> McpConnection:
        key = hash_token(token)
        existing = self._connections.get(key)
        if self._trusted(existing):
            assert existing is not None
            existing.last_used = time.monotonic()
            return existing
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            existing = self._connections.get(key)
            if self._trusted(existing):
                assert existing is not None
                return existing
            if existing is not None and existing.alive:
                await existing.reverify()  # McpUnauthorized once the token is no longer taken
                return existing
            if existing is not None:
                await existing.close()
            await self._evict_idle()
            connection = McpConnection(
                self.url,
                token,
                connect_timeout=self._connect_timeout,
                read_timeout=self._read_timeout,
            )
            await connection.open()
            self.connects += 1
            self._connections[key] = connection
            return connection

    async def _evict_idle(self) -> None:
        now = time.monotonic()
        stale = [
            k
            for k, c in self._connections.items()
            if now - c.last_used > self._idle_seconds or not c.alive
        ]
        if len(self._connections) - len(stale) >= self._max:
            oldest = min(self._connections, key=lambda k: self._connections[k].last_used)
            stale.append(oldest)
        for key in stale:
            self._locks.pop(key, None)
            connection = self._connections.pop(key, None)
            if connection is not None:
                await connection.close()
        # Tokens that never got a connection (refused ones) must not leave a lock behind each.
        for key in [k for k, lock in self._locks.items() if k not in self._connections]:
            if not self._locks[key].locked():
                del self._locks[key]

    async def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)


async def _refusal(response: httpx2.Response) -> str:
    """The reason the MCP server gave for a 403 (its `error_description`)."""
    await response.aread()
    try:
        said = response.json().get("error_description")
    except (ValueError, AttributeError):
        said = None
    return said[:300] if isinstance(said, str) and said else "the MCP server refused (403)"


def _seconds(retry_after: str | None) -> int | None:
    """Retry-After in seconds (the delay form; a date is rare here and read as unknown)."""
    try:
        return max(0, int(retry_after)) if retry_after is not None else None
    except ValueError:
        return None


def _describe(error: BaseException | None) -> str:
    leaves = [e for e in _flatten(error) if not isinstance(e, asyncio.CancelledError)]
    if not leaves:
        return "closed"
    first = leaves[0]
    return f"{type(first).__name__}: {first}"[:300]


def _flatten(error: BaseException | None) -> list[BaseException]:
    if error is None:
        return []
    if isinstance(error, BaseExceptionGroup):
        return [leaf for sub in error.exceptions for leaf in _flatten(sub)]
    cause = error.__cause__ or error.__context__
    return [error, *(_flatten(cause) if cause is not None and cause is not error else [])]
