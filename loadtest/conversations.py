"""What the model user sends: the loop's real system prompt and the MCP server's real tool
schemas (listed in-process, converted as the loop converts them), with history lengths taken
from the seed scenarios (a first turn, after a search, after a confirmation)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

EMPLOYEE = "E001"  # demo-token-employee in the seed data


async def _real_tools_and_search() -> tuple[list[dict[str, Any]], list[str]]:
    """The tool schemas and two real search_leaves results, from a seeded in-memory server."""
    from loop.mcp_pool import tool_info
    from mcp_server.leaves import LeaveService
    from mcp_server.metrics import ServerMetrics
    from mcp_server.seed import seed
    from mcp_server.storage import Database
    from mcp_server.tools import build_server, search_result

    database = Database("sqlite://")
    try:
        seed(database)
        service = LeaveService(database)
        listed = await build_server(service, ServerMetrics()).list_tools()
        results = [
            search_result(service, EMPLOYEE, keyword, None).model_dump_json()
            for keyword in ("家庭旅遊", "")
        ]
    finally:
        database.dispose()
    tools = [tool_info(t).openai_tool() for t in listed]
    return tools, results


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
            }
        ],
    }


def build() -> dict[str, Any]:
    from common.contract import SYSTEM_PROMPT
    from common.scenarios import CANCEL_DECLINED, QUERY_ALL, SUBMIT_DRAFT

    tools, (one_leave, all_leaves) = asyncio.run(_real_tools_and_search())
    system = {"role": "system", "content": SYSTEM_PROMPT}
    found_one = {"role": "tool", "tool_call_id": "call_1", "content": one_leave}
    found_all = {"role": "tool", "tool_call_id": "call_1", "content": all_leaves}
    histories = [
        [system, {"role": "user", "content": QUERY_ALL.request}],
        [
            system,
            {"role": "user", "content": SUBMIT_DRAFT.request},
            _call("call_1", "search_leaves", {"keyword": "家庭旅遊"}),
            found_one,
        ],
        [
            system,
            {"role": "user", "content": QUERY_ALL.request},
            _call("call_1", "search_leaves", {"keyword": ""}),
            found_all,
            {"role": "assistant", "content": "找到你的假單，列在上面。"},
            {"role": "user", "content": CANCEL_DECLINED.request},
        ],
    ]
    return {"tools": tools, "conversations": [{"messages": m} for m in histories]}


def write(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(build(), ensure_ascii=False, indent=1) + "\n")
    return path
