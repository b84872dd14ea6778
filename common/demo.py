"""The demo employees of development (`python -m mcp_server seed`): who they are and their known
demo tokens, which the MCP server refuses in production. The seed step writes them; the chat
page offers them as its sign-in where no identity provider is set up."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DemoEmployee:
    employee_id: str
    name: str
    manager_id: str | None
    token: str


DEMO_EMPLOYEES = (
    DemoEmployee("E001", "王小明", "M001", "demo-token-employee"),
    DemoEmployee("E002", "李小華", "M001", "demo-token-other"),
    DemoEmployee("M001", "陳美玲", None, "demo-token-manager"),
)
