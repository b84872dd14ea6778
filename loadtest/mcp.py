"""A minimal MCP client over Streamable HTTP, on the standard library, for the load users'
own data: tool calls as one employee (or their manager), answers to the server's elicitation.

Not the SDK's client: it is asyncio, and Locust's users are gevent greenlets, in which the
standard library's sockets are cooperative. It speaks the stateful protocol revision every
MCP server serves (2025-11-25: `initialize`, `Mcp-Session-Id`, server requests on the call's
SSE stream), which is all a tool call and a confirmation need.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from common.sse import Parser

PROTOCOL_VERSION = "2025-11-25"
CLIENT_INFO = {"name": "leave-copilot-loadtest", "version": "1"}
TIMEOUT_SECONDS = 30.0


class McpError(Exception):
    """The server did not answer as MCP (HTTP status, a protocol error, a broken stream)."""


class ToolRefused(Exception):
    """A tool answered with an error result (a rule said no): its code and message."""

    def __init__(self, tool: str, code: str, message: str) -> None:
        super().__init__(f"{tool}: {code}: {message[:200]}")
        self.code = code


# (the server's question, its requested schema) → the elicitation answer to send back
Answer = Callable[[str, dict[str, Any]], dict[str, Any]]


class McpClient:
    """One MCP session for one bearer token; opened on the first call, reopened if the server
    has forgotten it."""

    def __init__(self, url: str, token: str, timeout: float = TIMEOUT_SECONDS) -> None:
        parts = urlsplit(url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if self._https else 80)
        self._path = parts.path or "/mcp"
        self._token = token
        self._timeout = timeout
        self._session: str | None = None
        self._ids = itertools.count(1)
        self._conn: http.client.HTTPConnection | None = None

    # -- public ---------------------------------------------------------------------------

    def call(self, tool: str, arguments: dict[str, Any], answer: Answer | None = None) -> Any:
        """The tool's structured result; ToolRefused when it answered with an error."""
        if self._session is None:
            self._open()
        try:
            result = self._request("tools/call", {"name": tool, "arguments": arguments}, answer)
        except _SessionGone:
            self._session = None
            self._open()
            result = self._request("tools/call", {"name": tool, "arguments": arguments}, answer)
        if result.get("isError"):
            error = (result.get("structuredContent") or {}).get("error") or {}
            text = " ".join(c.get("text", "") for c in result.get("content") or [])
            raise ToolRefused(tool, str(error.get("code") or "error"), error.get("message") or text)
        return result.get("structuredContent")

    def signs_in(self) -> bool:
        """Whether the server takes this client's token: a session opens (False on a 401)."""
        try:
            self._open()
        except McpError as error:
            if str(error).startswith("initialize: HTTP 401"):
                return False
            raise
        return True

    def close(self) -> None:
        """End the session on the server (DELETE), then the connection."""
        if self._session is not None:
            # the server or its session may be gone already: then nothing is left to end
            with contextlib.suppress(OSError, http.client.HTTPException):
                self._send("DELETE", None)[1].read()
            self._session = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- protocol -------------------------------------------------------------------------

    def _open(self) -> None:
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {"elicitation": {}},
            "clientInfo": CLIENT_INFO,
        }
        self._request("initialize", params, None, opening=True)
        self._notify("notifications/initialized")

    def _notify(self, method: str) -> None:
        status, response = self._send("POST", {"jsonrpc": "2.0", "method": method})
        response.read()
        if status >= 400:
            raise McpError(f"{method}: HTTP {status}")

    def _request(
        self, method: str, params: dict[str, Any], answer: Answer | None, opening: bool = False
    ) -> dict[str, Any]:
        request_id = next(self._ids)
        body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        status, response = self._send("POST", body)
        if status == 404 and not opening:
            response.read()
            raise _SessionGone
        if status >= 400:
            raise McpError(f"{method}: HTTP {status}: {response.read()[:300]!r}")
        if opening:
            self._session = response.getheader("mcp-session-id")
        for message in self._messages(response):
            if message.get("id") == request_id and "method" not in message:
                if "error" in message:
                    raise McpError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result") or {}
                self._drain(response)
                return result
            if message.get("method") == "elicitation/create":
                self._answer_elicitation(message, answer)
        raise McpError(f"{method}: the stream ended without an answer")

    def _answer_elicitation(self, message: dict[str, Any], answer: Answer | None) -> None:
        params = message.get("params") or {}
        content = (
            answer(str(params.get("message", "")), params.get("requestedSchema") or {})
            if answer
            else {"action": "decline"}
        )
        # on a connection of its own: the call's stream is still open on the first one
        reply = McpClient(self._url(), self._token, self._timeout)
        reply._session = self._session
        try:
            status, response = reply._send(
                "POST", {"jsonrpc": "2.0", "id": message["id"], "result": content}
            )
            response.read()
        finally:
            if reply._conn is not None:
                reply._conn.close()
        if status >= 400:
            raise McpError(f"elicitation answer: HTTP {status}")

    def _messages(self, response: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
        kind = response.getheader("content-type", "")
        if kind.startswith("application/json"):
            data = json.loads(response.read() or b"null")
            yield from data if isinstance(data, list) else [data]
            return
        parser = Parser()
        while True:
            chunk = response.read1(65536)
            if not chunk:
                return
            for event in parser.feed(chunk, 0.0):
                if event.data:
                    yield json.loads(event.data)

    @staticmethod
    def _drain(response: http.client.HTTPResponse) -> None:
        while response.read1(65536):
            pass

    # -- transport ------------------------------------------------------------------------

    def _url(self) -> str:
        scheme = "https" if self._https else "http"
        return f"{scheme}://{self._host}:{self._port}{self._path}"

    def _send(self, method: str, body: Any) -> tuple[int, http.client.HTTPResponse]:
        headers = {
            "Authorization": f"Bearer {self._token}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        if self._session:
            headers |= {"Mcp-Session-Id": self._session, "MCP-Protocol-Version": PROTOCOL_VERSION}
        payload = None if body is None else json.dumps(body, ensure_ascii=False).encode()
        for attempt in (1, 2):
            if self._conn is None:
                cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
                self._conn = cls(self._host, self._port, timeout=self._timeout)
            try:
                self._conn.request(method, self._path, body=payload, headers=headers)
                response = self._conn.getresponse()
                return response.status, response
            except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
                # an idle keep-alive connection the server closed: once more on a new one
                self._conn.close()
                self._conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


class _SessionGone(Exception):
    """HTTP 404 on a session id: the server no longer knows the session (it restarted)."""
