"""The services agree on the words they share (common/contract.py).

Each side is read as its own code sees the words (the simulator's policy module, the MCP
server's rules and published tools, the loop's engine), and the conversations run the real
pieces together in one process: the simulator's generation as the loop's model, the real MCP
server (in memory, as one employee) as its tools. A side that redefines a word locally, or
stops asking for what the other allows, fails here.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from mcp import Client
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.types import ElicitResult
from sqlalchemy import select

from loop import engine, verify
from loop.engine import AgentLoop, RunResult, ToolInfo, ToolResult
from mcp_server import leaves as rules
from mcp_server.leaves import LeaveService
from mcp_server.messages import Refusal
from mcp_server.metrics import ServerMetrics
from mcp_server.storage import Database, Leave
from mcp_server.tools import build_server
from modelsim import generate, policy
from tests.fakes import SimulatedModel

FAR_MONDAY = dt.date(2031, 3, 3)  # clear of the seed data, which lies in the coming weeks


class ServerTools:
    """The loop's tools over a client of the real MCP server, handed on as loop/mcp_pool and
    loop/runs hand on a result: the text blocks joined, the error flag, the structured part."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def list(self) -> list[ToolInfo]:
        listed = (await self.client.list_tools()).tools
        return [
            ToolInfo(
                t.name,
                t.description or "",
                {k: v for k, v in t.input_schema.items() if k != "title"},
                bool(t.annotations and t.annotations.destructive_hint),
                bool(t.annotations and t.annotations.read_only_hint),
            )
            for t in listed
        ]

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        result = await self.client.call_tool(name, arguments)
        text = "\n".join(getattr(block, "text", "") for block in result.content)
        return ToolResult(text, bool(result.is_error), result.structured_content)


@pytest.fixture
def server(service: LeaveService):
    return build_server(service, ServerMetrics())


@asynccontextmanager
async def acting_as(server: Any, employee_id: str, answer: str) -> AsyncIterator[ServerTools]:
    """Tools as `employee_id` (as the auth middleware would set it); every confirmation the
    server asks for gets `answer` (accept, decline or cancel)."""

    async def confirm(_context: Any, _params: Any) -> ElicitResult:
        if answer == "accept":
            return ElicitResult(action="accept", content={"confirm": True})
        return ElicitResult(action=answer)

    user = AuthenticatedUser(
        AccessToken(token="t", client_id=employee_id, scopes=[], subject=employee_id)
    )
    reset = auth_context_var.set(user)
    try:
        async with Client(server, elicitation_callback=confirm) as client:
            yield ServerTools(client)
    finally:
        auth_context_var.reset(reset)


async def converse(
    server: Any,
    employee_id: str,
    request: str,
    *,
    answer: str = "accept",
    faults: set[str] | None = None,
) -> RunResult:
    async with acting_as(server, employee_id, answer) as tools:
        return await AgentLoop(SimulatedModel(faults)).run(request, tools)


def tool_calls(result: RunResult) -> list[tuple[str, dict[str, Any]]]:
    return [(s.name, s.arguments) for s in result.steps if s.type == "tool"]


def status_of(service: LeaveService, leave_id: str) -> str:
    return service.visible_leave("M001", leave_id).status


def leave_id_by_reason(database: Database, reason: str) -> str:
    with database.read() as s:
        return s.scalars(select(Leave.id).where(Leave.reason == reason)).one()


# -- the same words ------------------------------------------------------------------------


async def test_the_server_publishes_the_tools_the_loop_and_the_simulator_name(server):
    published = {t.name for t in await server.list_tools()}
    assert published == {str(name) for name in policy.ToolName}
    assert {verify.CHECK_TOOL, *verify.TARGET_STATUS} <= published
    assert generate.UNKNOWN_TOOL_NAME not in published  # the fault must name no real tool


async def test_the_server_publishes_and_accepts_the_statuses_the_simulator_names(server):
    statuses = {str(s) for s in rules.ALL_STATUSES}
    assert set(policy.STATUS_ZH) == statuses
    assert set(policy.VERB_ZH) == set(policy.VERB_EN) == set(rules.UPDATABLE_STATUSES)
    assert set(policy.INTENT_STATUS.values()) <= set(rules.UPDATABLE_STATUSES)
    # what the model reads about statuses names every one of them
    tools = {t.name: t for t in await server.list_tools()}
    search_status = tools["search_leaves"].input_schema["properties"]["status"]["description"]
    leave_view = tools["search_leaves"].output_schema["$defs"]["LeaveView"]["properties"]
    for status in statuses:
        assert status in search_status
        assert status in leave_view["status"]["description"]


def test_every_leave_type_name_the_server_accepts_is_a_type_the_simulator_knows(service):
    simulator_types = set(policy.LEAVE_TYPES)
    for week, (canonical, aliases) in enumerate(rules.LEAVE_TYPES.items()):
        for day, name in enumerate((canonical, *aliases)):
            start = (FAR_MONDAY + dt.timedelta(weeks=week * 5 + day)).isoformat()
            view = service.create("E001", name, start, start, "contract check")
            assert view.leave_type == canonical, name
            assert view.leave_type in simulator_types, name
    assert simulator_types == set(rules.LEAVE_TYPES)


def test_the_simulator_reads_a_tool_error_as_the_loop_writes_it():
    refusal = Refusal("unknown_leave_id", leave_id="LV-000000").render("zh-TW")
    written = f"{engine.TOOL_ERROR_PREFIX} {refusal}"
    assert policy._is_error(written)
    assert policy._error_text(written) == refusal


# -- whole conversations -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("employee_id", "request_text", "reason", "before", "after"),
    [
        ("E001", "把我那張家庭旅遊的特休送出審核", "家庭旅遊，去花蓮三天", "draft", "submitted"),
        ("M001", "核准搬家的假", "搬家", "submitted", "approved"),
        ("M001", "駁回牙齒矯正回診的假", "牙齒矯正回診", "submitted", "rejected"),
        ("E001", "取消表妹婚禮那張假", "回台南參加表妹婚禮", "approved", "cancelled"),
    ],
    ids=["submit", "approve", "reject", "cancel"],
)
async def test_every_step_the_simulator_takes_is_one_the_server_allows(
    server, service, database, employee_id, request_text, reason, before, after
):
    leave_id = leave_id_by_reason(database, reason)
    assert status_of(service, leave_id) == before
    result = await converse(server, employee_id, request_text)
    assert result.status == "completed"
    assert result.tool_errors == 0, result.messages
    assert tool_calls(result)[0][0] == "search_leaves"
    assert tool_calls(result)[-1][1]["leave_id"] == leave_id
    assert status_of(service, leave_id) == after


@pytest.mark.parametrize("leave_type", list(policy.LEAVE_TYPES))
async def test_a_leave_the_simulator_creates_has_the_type_it_was_asked_for(
    server, service, leave_type
):
    week = list(policy.LEAVE_TYPES).index(leave_type)
    day = (FAR_MONDAY + dt.timedelta(weeks=week)).isoformat()
    result = await converse(server, "E001", f"幫我請 {day} 的{leave_type}，事由：合約測試")
    assert result.tool_errors == 0, result.messages
    [(name, arguments)] = tool_calls(result)
    assert (name, arguments["leave_type"]) == ("create_leave", leave_type)
    created = service.search("E001", "合約測試", None)
    assert [(v.leave_type, v.status) for v in created] == [(leave_type, "draft")]


async def test_a_step_the_simulator_skips_is_one_the_server_refuses(server, service, database):
    leave_id = leave_id_by_reason(database, "家庭旅遊，去花蓮三天")
    result = await converse(server, "E001", "把我那張家庭旅遊的特休送出審核", faults={"skip_step"})
    [*_, (name, arguments)] = tool_calls(result)
    assert (name, arguments["status"]) == ("update_leave_status", "approved")
    assert status_of(service, leave_id) == "draft"
    refusal = Refusal(
        "wrong_step",
        leave_id=leave_id,
        current="draft",
        requested="approved",
        allowed=["submitted"],
    ).render("zh-TW")
    # read as a failure, not as "done"
    assert result.answer == f"這個操作沒有完成：{refusal}"


@pytest.mark.parametrize("answer", ["decline", "cancel"])
async def test_a_cancellation_the_user_does_not_confirm_is_read_as_kept(
    server, service, database, answer
):
    leave_id = leave_id_by_reason(database, "回台南參加表妹婚禮")
    result = await converse(server, "E001", "取消表妹婚禮那張假", answer=answer)
    assert status_of(service, leave_id) == "approved"
    assert result.answer == f"你沒有確認取消，假單 {leave_id} 維持已核准，沒有任何變更。"


def test_every_refusal_code_has_its_texts_and_the_server_uses_no_other():
    from common.contract import RefusalCode
    from mcp_server.messages import TEMPLATES

    assert set(TEMPLATES) == set(RefusalCode)
