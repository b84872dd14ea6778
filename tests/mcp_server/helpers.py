"""What the MCP server's tests share: an in-memory client acting as one employee, one that
answers its confirmations, and reading a search or a refusal."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp import Client
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.types import ElicitResult


class Elicitations:
    """Answers confirmations with a fixed action and remembers what was asked."""

    def __init__(self, action: str = "accept", content: dict[str, Any] | None = None) -> None:
        self.action = action
        self.content = content if content is not None else {"confirm": True}
        self.asked: list[Any] = []

    async def __call__(self, _context: Any, params: Any) -> ElicitResult:
        self.asked.append(params)
        if self.action == "accept":
            return ElicitResult(action="accept", content=self.content)
        return ElicitResult(action=self.action)


@asynccontextmanager
async def connect_to(
    server: Any, employee_id: str, elicitations: Elicitations | None = None
) -> AsyncIterator[Client]:
    """An in-memory client acting as `employee_id` (as the auth middleware would set it)."""
    user = AuthenticatedUser(
        AccessToken(token="t", client_id=employee_id, scopes=[], subject=employee_id)
    )
    reset = auth_context_var.set(user)
    try:
        async with Client(server, elicitation_callback=elicitations or Elicitations()) as client:
            yield client
    finally:
        auth_context_var.reset(reset)


async def find(client: Client, keyword: str, status: str | None = None) -> list[dict[str, Any]]:
    args: dict[str, Any] = {"keyword": keyword}
    if status:
        args["status"] = status
    result = await client.call_tool("search_leaves", args)
    assert not result.is_error, result.content
    return result.structured_content["leaves"]


def error_code(result: Any) -> str:
    assert result.is_error, result.content
    return result.structured_content["error"]["code"]
