"""Tool calls written as text: recognised in every shape; never streamed or stored as an answer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from common import sse
from common.contract import ToolName
from loop.model import OpenAIChatModel
from loop.toolcall_text import content_of_tool_turn, could_open_tool_call, looks_like_tool_call
from tests.support import serving_in_thread

TOOLS = {"search_leaves", "update_leave_status", "cancel_approved_leave"}
ALL_TOOLS = {str(name) for name in ToolName}
CALL = '{"name": "search_leaves", "arguments": {"keyword": "家庭旅遊"}}'
SECOND = (
    '{"name": "update_leave_status", "arguments": {"leave_id": "LV-a83ba4", "status": "submitted"}}'
)


@pytest.mark.parametrize(
    "text",
    [
        CALL,
        f"```json\n{CALL}\n```",  # fenced, as a fine-tune without a parser writes it
        '```json\n{\n  "name": "search_leaves",\n  "arguments": {"keyword": "x"}\n}\n```',
        f"{CALL}\n{SECOND}",  # one per line: the old check parsed first { to last } and missed it
        f"[{CALL}, {SECOND}]",
        '{"name": "search_leaves", "parameters": {"keyword": "x"}}',
        '```json\n{\n  "name": "update_leave_status",\n  "arguments": {"leave_id": "LV-a8',  # cut off
        f"<tool_call>\n{CALL}\n</tool_call>",
        f"我先查一下。\n{CALL}",
    ],
)
def test_tool_calls_written_as_text_are_recognised(text):
    assert looks_like_tool_call(text, TOOLS)


@pytest.mark.parametrize(
    "text",
    [
        "已將 LV-a83ba4 送出審核。",
        "找到 1 張假單：{特休，2026-12-28～2026-12-30}",
        '{"name": "delete_all_leaves", "arguments": {}}',  # not one of our tools
        "我可以用 search_leaves 幫你查詢。",
        "",
    ],
)
def test_answers_are_not_mistaken_for_tool_calls(text):
    assert not looks_like_tool_call(text, TOOLS)


REAL_OUTPUTS = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "vllm-0.32" / "model-tool-text.json").read_text()
)["outputs"]


@pytest.mark.parametrize("output", REAL_OUTPUTS, ids=[o["request"][:24] for o in REAL_OUTPUTS])
def test_the_test_models_real_outputs_are_told_apart(output):
    """What the 0.5B model of `make test-vllm` really wrote (no parser): its tool calls —
    fenced, several per line, cut off by `length` — are recognised; its prose is not."""
    assert looks_like_tool_call(output["content"], ALL_TOOLS) == output["writes_tool_calls"]


def test_what_may_still_become_a_tool_call():
    for prefix in ("", "  ", "`", "``", "```js", "{", ' {"na', "<tool", "[TOOL"):
        assert could_open_tool_call(prefix), prefix
    for text in ("已", "Sure", "LV-", "假單"):
        assert not could_open_tool_call(text), text
    assert content_of_tool_turn('```json\n{"name": "search_') == ""
    assert content_of_tool_turn(f"我先查一下。\n{CALL}") == "我先查一下。"
    assert content_of_tool_turn("我先查一下。") == "我先查一下。"


# --- a model server whose parser recognises the call only after some tokens -------------------

LEAKED = ["```json\n", "{\n", '  "name": "search_', "leaves", '"']
TOOL_CALL = {"id": "chatcmpl-tool-1", "type": "function",
             "function": {"name": "search_leaves", "arguments": '{"keyword": "家庭旅遊"}'}}  # fmt: skip
ANSWER = ["找到", " 1 ", "張假單", "。"]


def chunk(delta: dict, finish: str | None = None) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return sse.frame(body)


async def completions(request: Request) -> Response:
    body = await request.json()
    tool_turn = body["messages"][-1]["content"] == "tool turn"
    if not body.get("stream"):
        message = {"role": "assistant", "content": "".join(LEAKED if tool_turn else ANSWER)}
        if tool_turn:
            message["tool_calls"] = [TOOL_CALL]
        return JSONResponse({"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                             "choices": [{"index": 0, "message": message,
                                          "finish_reason": "tool_calls" if tool_turn else "stop"}],
                             "usage": {"prompt_tokens": 5, "completion_tokens": 7,
                                       "total_tokens": 12}})  # fmt: skip

    def events() -> Iterator[bytes]:
        yield chunk({"role": "assistant", "content": ""})
        for piece in LEAKED if tool_turn else ANSWER:
            yield chunk({"content": piece})
        if tool_turn:
            yield chunk({"tool_calls": [{**TOOL_CALL, "index": 0}]}, "tool_calls")
        else:
            yield chunk({}, "stop")
        usage = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
        yield sse.frame({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                         "choices": [], "usage": usage})  # fmt: skip
        yield sse.DONE_FRAME

    return StreamingResponse(events(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def late_parser_server() -> Iterator[str]:
    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    with serving_in_thread(app, "the fake model server") as base:
        yield f"{base}/v1"


async def reply(base_url: str, stream: bool, turn: str) -> tuple[dict, list[str]]:
    sent: list[str] = []

    async def on_text(delta: str) -> None:
        sent.append(delta)

    model = OpenAIChatModel(base_url=base_url, model="m", api_key="k", stream=stream)
    try:
        answer = await model.complete([{"role": "user", "content": turn}], [], on_text)
    finally:
        await model.close()
    return answer.message, sent


async def test_a_tool_turn_streams_no_text_and_stores_what_a_whole_reply_stores(late_parser_server):
    streamed, sent = await reply(late_parser_server, True, "tool turn")
    whole, _ = await reply(late_parser_server, False, "tool turn")
    assert sent == []  # before: the first deltas (```json {"name": …) reached the user
    assert streamed["content"] == whole["content"] == ""
    assert streamed["tool_calls"][0]["function"] == whole["tool_calls"][0]["function"]


async def test_a_text_turn_still_streams_token_by_token(late_parser_server):
    streamed, sent = await reply(late_parser_server, True, "text turn")
    whole, _ = await reply(late_parser_server, False, "text turn")
    assert sent == ANSWER
    assert streamed["content"] == whole["content"] == "".join(ANSWER)
