"""The scripted policy against the real MCP server, both as processes over sockets.

The seed article's bare loop (benchmarks/seed_loop.py) connects them, so these tests show the
simulator completes the seed scenarios with no help from the loop service.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from mcp.types import ElicitResult

from benchmarks.seed_loop import seed_loop
from tests.support import mcp_server, model_simulator

from .helpers import SEED_REQUEST


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[tuple[str, str]]:
    workdir = tmp_path_factory.mktemp("stack")
    with mcp_server(workdir) as mcp_base, model_simulator(workdir, profile="instant") as sim:
        yield f"{mcp_base}/mcp", f"{sim}/v1"


async def drive(
    stack: tuple[str, str],
    request: str,
    token: str = "demo-token-employee",
    confirm: str = "accept",
) -> tuple[str, list[tuple[str, dict[str, Any], str]]]:
    """Run one request to its final answer; returns (answer, [(tool, arguments, result)])."""
    mcp_url, model_url = stack
    model = openai.AsyncOpenAI(base_url=model_url, api_key="unused", max_retries=0)

    async def on_elicit(_context, _params) -> ElicitResult:
        if confirm == "accept":
            return ElicitResult(action="accept", content={"confirm": True})
        return ElicitResult(action=confirm)

    run = await seed_loop(mcp_url, token, model, request, elicitation_callback=on_elicit)
    assert run.turns < 8, "no answer within 8 turns"
    return run.answer, run.steps


async def test_seed_request_submits_the_real_draft(stack):
    answer, steps = await drive(stack, SEED_REQUEST)
    assert [s[0] for s in steps] == ["search_leaves", "update_leave_status"]
    assert steps[0][1] == {"keyword": "家庭旅遊"}
    real_id = json.loads(steps[0][2])["leaves"][0]["leave_id"]
    assert steps[1][1] == {"leave_id": real_id, "status": "submitted"}
    assert answer == f"已將 {real_id} 送出審核。"
    # asked again, it sees the leave is already submitted and says so instead of acting
    answer, steps = await drive(stack, SEED_REQUEST)
    assert [s[0] for s in steps] == ["search_leaves"]
    assert "審核中" in answer


async def test_query_and_balance(stack):
    answer, steps = await drive(stack, "查一下我的婚禮假單")
    assert [s[0] for s in steps] == ["search_leaves"]
    assert "找到 1 張假單" in answer and "婚禮" in answer
    answer, steps = await drive(stack, "我的假期餘額還有多少？")
    assert [s[0] for s in steps] == ["get_leave_balance"]
    assert "特休" in answer


async def test_cancel_declined_then_accepted(stack):
    answer, steps = await drive(stack, "取消我表妹婚禮那張假", confirm="decline")
    assert [s[0] for s in steps] == ["search_leaves", "cancel_approved_leave"]
    assert "維持已核准" in answer
    answer, steps = await drive(stack, "取消我表妹婚禮那張假", confirm="accept")
    assert [s[0] for s in steps] == ["search_leaves", "cancel_approved_leave"]
    assert answer.startswith("已取消假單")


async def test_manager_approves_a_report_leave(stack):
    answer, steps = await drive(stack, "核准李小華的搬家假單", token="demo-token-manager")
    assert [s[0] for s in steps] == ["search_leaves", "update_leave_status"]
    assert steps[1][1]["status"] == "approved"
    assert "核准" in answer


async def test_nothing_found_and_not_understood(stack):
    answer, steps = await drive(stack, "把我那張環島旅行的特休送出審核")
    assert [s[0] for s in steps] == ["search_leaves"] and "找不到" in answer
    answer, steps = await drive(stack, "講個笑話")
    assert steps == [] and "差勤助手" in answer
