"""Every invariant of the loop, against a scripted fake model (a queue of canned turns)."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

from common.contract import SYSTEM_PROMPT, TOOL_ERROR_PREFIX, StepOutcome
from loop.engine import (
    MAX_TURNS_ANSWER,
    AgentLoop,
    LoopConfig,
    ModelError,
    ToolResult,
    ToolsUnavailable,
)
from tests.fakes import FakeTools, ScriptedModel, call, calls, text


def tool_messages(result) -> list[dict[str, Any]]:
    return [m for m in result.messages if m["role"] == "tool"]


def assert_every_call_answered_once(messages: list[dict[str, Any]]) -> None:
    asked = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert sorted(asked) == sorted(answered)


async def test_the_five_steps_end_on_plain_text():
    model = ScriptedModel(
        calls(call("search_leaves", {"keyword": "家庭旅遊"})), text("已將 LV-1 送出審核。")
    )
    tools = FakeTools({"search_leaves": lambda a: '{"count": 1}'})
    result = await AgentLoop(model).run("送出家庭旅遊", tools)
    assert (result.status, result.answer, result.turns) == ("completed", "已將 LV-1 送出審核。", 2)
    assert tools.called == [("search_leaves", {"keyword": "家庭旅遊"})]
    first = model.seen[0]
    assert first[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert first[-1] == {"role": "user", "content": "送出家庭旅遊"}
    assert (result.prompt_tokens, result.completion_tokens) == (20, 8)


async def test_assistant_message_is_appended_as_returned_with_null_content_as_empty():
    tool_call = call("search_leaves", {"keyword": "x"}, "call-1")
    model = ScriptedModel(calls(tool_call), text("done"))
    result = await AgentLoop(model).run("hi", FakeTools({"search_leaves": lambda a: "[]"}))
    assistant = model.seen[1][2]
    assert assistant == {"role": "assistant", "content": "", "tool_calls": [tool_call]}
    assert model.seen[1][3] == {"role": "tool", "tool_call_id": "call-1", "content": "[]"}
    assert_every_call_answered_once(result.messages)


async def test_parallel_calls_run_concurrently_bounded_and_answer_in_order():
    async def slow(arguments):
        await asyncio.sleep(0.01 * (5 - arguments["n"]))  # later calls finish first
        return f"result-{arguments['n']}"

    batch = [call("lookup", {"n": n}, f"id-{n}") for n in range(5)]
    model = ScriptedModel(calls(*batch), text("ok"))
    tools = FakeTools({"lookup": slow})
    result = await AgentLoop(model, LoopConfig(tool_concurrency=2)).run("go", tools)
    answered = tool_messages(result)
    assert [m["tool_call_id"] for m in answered] == [f"id-{n}" for n in range(5)]
    assert [m["content"] for m in answered] == [f"result-{n}" for n in range(5)]
    assert tools.max_running == 2


async def test_bad_json_unknown_tool_and_is_error_become_readable_tool_messages():
    model = ScriptedModel(
        calls(
            call("search_leaves", '{"keyword": "x"', "bad-json"),
            call("delete_everything", {}, "unknown"),
            call("update_leave_status", {"leave_id": "LV-0"}, "refused"),
        ),
        text("explained"),
    )
    tools = FakeTools(
        {
            "search_leaves": lambda a: "[]",
            "update_leave_status": lambda a: ToolResult("找不到假單 LV-0。請先查詢。", True),
        }
    )
    result = await AgentLoop(model).run("go", tools)
    by_id = {m["tool_call_id"]: m["content"] for m in tool_messages(result)}
    assert by_id["bad-json"].startswith(TOOL_ERROR_PREFIX) and "JSON" in by_id["bad-json"]
    assert by_id["unknown"].startswith(TOOL_ERROR_PREFIX) and "search_leaves" in by_id["unknown"]
    assert by_id["refused"] == f"{TOOL_ERROR_PREFIX} 找不到假單 LV-0。請先查詢。"
    assert tools.called == [("update_leave_status", {"leave_id": "LV-0"})]
    assert result.status == "completed"
    errors = {s.tool_call_id: s.error for s in result.steps if s.type == "tool"}
    assert errors == {
        "bad-json": "invalid_arguments",
        "unknown": "unknown_tool",
        "refused": "tool_error",
    }


async def test_a_raising_or_timing_out_tool_still_gets_its_tool_message():
    async def hang(_):
        await asyncio.Event().wait()

    def boom(_):
        raise RuntimeError("db down")

    model = ScriptedModel(calls(call("hang", {}, "h"), call("boom", {}, "b")), text("sorry"))
    config = LoopConfig(tool_timeout=0.05)
    tools = FakeTools({"hang": hang, "boom": boom}, read_only=("hang", "boom"))
    result = await AgentLoop(model, config).run("go", tools)
    by_id = {m["tool_call_id"]: m["content"] for m in tool_messages(result)}
    assert "逾時" in by_id["h"] and "RuntimeError" in by_id["b"]
    assert_every_call_answered_once(model.seen[1])


async def test_max_turns_ends_with_a_status_and_the_transcript():
    model = ScriptedModel(*(calls(call("search_leaves", {"keyword": str(i)})) for i in range(3)))
    result = await AgentLoop(model, LoopConfig(max_turns=3)).run(
        "loop", FakeTools({"search_leaves": lambda a: "[]"})
    )
    assert (result.status, result.answer, result.turns) == ("max_turns", MAX_TURNS_ANSWER, 3)
    assert len(tool_messages(result)) == 3
    assert_every_call_answered_once(result.messages)


async def test_a_stop_tool_ends_the_run_with_its_arguments_as_the_result():
    model = ScriptedModel(calls(call("submit_answer", {"leave_id": "LV-1", "done": True}, "s")))
    tools = FakeTools({"submit_answer": lambda a: "never called"})
    config = LoopConfig(stop_tools=frozenset({"submit_answer"}))
    result = await AgentLoop(model, config).run("go", tools)
    assert result.status == "completed"
    assert result.result == {"leave_id": "LV-1", "done": True}
    assert tools.called == []
    assert_every_call_answered_once(result.messages)


async def test_length_finish_is_reported_not_taken_as_an_answer():
    model = ScriptedModel(text("已將 LV-1 送", finish_reason="length"))
    result = await AgentLoop(model).run("go", FakeTools({}))
    assert (result.status, str(result.reason)) == ("failed", "length")
    assert result.detections == ["length"]


@pytest.mark.parametrize(
    "content",
    [
        '<tool_call>\n{"name": "search_leaves", "arguments": {"keyword": "x"}}\n</tool_call>',
        '```json\n{"name": "search_leaves", "arguments": {"keyword": "x"}}\n```',
    ],
)
async def test_a_tool_call_written_as_text_is_detected(content):
    model = ScriptedModel(text(content))
    result = await AgentLoop(model).run("go", FakeTools({"search_leaves": lambda a: "[]"}))
    assert (result.status, str(result.reason)) == ("failed", "tool_call_in_content")
    detection = next(s for s in result.steps if s.type == "detection")
    assert detection.error == "detected" and "--tool-call-parser" in detection.detail


async def test_plain_json_that_names_no_tool_is_an_answer():
    model = ScriptedModel(text('結果：{"days": 3}'))
    result = await AgentLoop(model).run("go", FakeTools({"search_leaves": lambda a: "[]"}))
    assert result.status == "completed"


async def test_model_failure_ends_with_failed_and_the_reason():
    model = ScriptedModel(ModelError("http_500 after 4 attempts"))
    result = await AgentLoop(model).run("go", FakeTools({}))
    assert result.status == "failed" and "http_500" in str(result.reason)


async def test_cancelling_a_run_mid_tool_call_answers_the_pending_calls():
    started = asyncio.Event()

    async def wait_forever(_):
        started.set()
        await asyncio.Event().wait()

    model = ScriptedModel(calls(call("slow", {}, "s1"), call("slow", {"x": 1}, "s2")))
    loop = AgentLoop(model)
    task = asyncio.create_task(loop.run("go", FakeTools({"slow": wait_forever})))
    await started.wait()
    task.cancel()
    result = await task
    assert result.status == "cancelled"
    assert_every_call_answered_once(result.messages)
    assert all("已取消" in m["content"] for m in tool_messages(result))


async def test_history_comes_between_the_system_prompt_and_the_new_request():
    history = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "ok"}]
    model = ScriptedModel(text("again"))
    await AgentLoop(model, LoopConfig(system_prompt="custom")).run("now", FakeTools({}), history)
    assert [m["content"] for m in model.seen[0]] == ["custom", "earlier", "ok", "now"]


async def test_today_s_date_follows_the_trained_prompt_when_given():
    """A model cannot turn 下週一 into a date without knowing the day: the date, with its
    weekday, is a line after the trained sentences (LOOP_DATE_IN_PROMPT)."""
    model = ScriptedModel(text("ok"))
    config = LoopConfig(system_prompt="custom", today=lambda: dt.date(2026, 12, 7))
    assert config.prompt() == "custom\n今天是 2026-12-07（星期一）。"
    await AgentLoop(model, config).run("下週一請假", FakeTools({}))
    assert model.seen[0][0] == {
        "role": "system",
        "content": "custom\n今天是 2026-12-07（星期一）。",
    }
    sunday = LoopConfig(system_prompt="p", today=lambda: dt.date(2026, 12, 13))
    assert sunday.prompt().endswith("（星期日）。")


async def test_every_step_is_recorded_with_timing_and_tokens():
    model = ScriptedModel(calls(call("search_leaves", {"keyword": "x"}, "c")), text("done"))
    events: list[str] = []

    async def emit(event):
        events.append(event.event)

    result = await AgentLoop(model).run(
        "go", FakeTools({"search_leaves": lambda a: "[]"}), emit=emit
    )
    kinds = [(s.type, s.name) for s in result.steps]
    assert kinds == [("model", "chat"), ("tool", "search_leaves"), ("model", "chat")]
    for step in result.steps:
        assert step.started_at and step.duration_ms >= 0
    assert result.steps[0].prompt_tokens == 10 and result.steps[0].completion_tokens == 5
    assert result.steps[1].arguments == {"keyword": "x"} and result.steps[1].result == "[]"
    assert events == [
        "model.started",
        "model.finished",
        "tool.started",
        "tool.finished",
        "model.started",
        "answer.delta",
        "model.finished",
    ]


async def test_unreachable_tools_end_the_run_as_failed_without_asking_the_model_again():
    def unreachable(_):
        raise ToolsUnavailable("MCP connection lost: Connection closed")

    model = ScriptedModel(
        calls(call("search_leaves", {}, "r"), call("update_leave_status", {}, "w")),
        text("已完成。"),  # never asked: it would only guess
    )
    tools = FakeTools({"search_leaves": lambda a: "[]", "update_leave_status": unreachable})
    result = await AgentLoop(model).run("go", tools)
    assert result.status == "failed"
    assert str(result.reason) == "tools_unavailable: MCP connection lost: Connection closed"
    assert "update_leave_status" in result.answer and "無法確認" in result.answer
    assert len(model.seen) == 1
    assert_every_call_answered_once(result.messages)


async def test_tools_unreachable_at_the_start_fail_the_run_with_the_reason():
    class Down(FakeTools):
        async def list(self):
            raise ToolsUnavailable("cannot connect to the MCP server: ConnectError")

    result = await AgentLoop(ScriptedModel()).run("go", Down({}))
    assert (result.status, str(result.reason)) == (
        "failed",
        "tools_unavailable: cannot connect to the MCP server: ConnectError",
    )
    assert result.answer


@pytest.mark.parametrize(("now", "applied"), [("submitted", True), ("draft", False)])
async def test_a_write_that_times_out_is_checked_before_anything_is_claimed(now, applied):
    async def stuck(_):
        await asyncio.Event().wait()

    def search(arguments):
        leave = {"leave_id": "LV-000001", "status": now}
        return ToolResult("…", False, {"count": 1, "leaves": [leave]})

    model = ScriptedModel(
        calls(call("update_leave_status", {"leave_id": "LV-000001", "status": "submitted"}, "u")),
        text("已送出。"),
    )
    tools = FakeTools({"update_leave_status": stuck, "search_leaves": search})
    result = await AgentLoop(model, LoopConfig(tool_timeout=0.05)).run("送出", tools)
    assert tools.called[-1] == ("search_leaves", {"keyword": "LV-000001"})
    update = next(s for s in result.steps if s.name == "update_leave_status")
    check = next(s for s in result.steps if s.type == "verify")
    assert check.result["leaves"][0]["status"] == now
    if applied:  # the change shows: the model hears so, and the run goes on
        assert update.error == "timeout_applied" and result.status == "completed"
        assert "已經生效" in tool_messages(result)[0]["content"]
        assert result.tool_errors == 0  # done, not an error: metrics and export see it so
    else:  # it does not show (yet): unknown, and the run ends saying how to check
        assert update.error == "timeout_outcome_unknown" and result.status == "failed"
        assert result.tool_errors == 1
        assert str(result.reason).startswith("outcome_unknown: update_leave_status（LV-000001）")
        assert "無法確認" in result.answer and "沒有完成" not in result.answer
        assert len(model.seen) == 1
    assert_every_call_answered_once(result.messages)


async def test_every_write_is_saved_as_it_starts_and_as_it_ends_reads_with_the_next_save():
    model = ScriptedModel(
        calls(call("search_leaves", {"keyword": "家庭旅遊"})),
        calls(call("update_leave_status", {"leave_id": "LV-1", "status": "submitted"})),
        text("已將 LV-1 送出審核。"),
    )
    tools = FakeTools(
        {"search_leaves": lambda a: "[LV-1]", "update_leave_status": lambda a: "submitted"},
        read_only=["search_leaves"],
    )
    saves: list[list[dict[str, Any]]] = []

    async def checkpoint(state):
        saves.append(state.snapshot())

    result = await AgentLoop(model).run("送出", tools, checkpoint=checkpoint)
    assert result.status == "completed"
    # the write's start: the read before it is in, finished; the write is in progress
    before, after = saves
    assert [(s["name"], s["error"]) for s in before if s["type"] == "tool"] == [
        ("search_leaves", None),
        ("update_leave_status", "in_progress"),
    ]
    assert before[-1]["arguments"] == {"leave_id": "LV-1", "status": "submitted"}
    # the write's end: its result is saved before the model is asked again
    assert [(s["name"], s["error"], s["result"]) for s in after if s["type"] == "tool"] == [
        ("search_leaves", None, "[LV-1]"),
        ("update_leave_status", None, "submitted"),
    ]


async def test_a_call_that_is_not_made_or_only_reads_is_not_saved_on_its_own():
    model = ScriptedModel(
        calls(call("search_leaves", {"keyword": "x"}), call("nope", {}), call("bad", "{oops")),
        text("沒有找到。"),
    )
    tools = FakeTools(
        {"search_leaves": lambda a: "[]", "bad": lambda a: "x"}, read_only=["search_leaves"]
    )
    saves: list[Any] = []

    async def checkpoint(state):
        saves.append(state.snapshot())

    result = await AgentLoop(model).run("查", tools, checkpoint=checkpoint)
    assert result.status == "completed" and saves == []
    assert len([s for s in result.steps if s.type == "tool"]) == 3  # all in the record


def test_a_step_as_a_dict_has_every_field_and_later_changes_do_not_reach_it():
    import dataclasses

    from loop.engine import Step

    step = Step("tool", "search_leaves", "2026-01-01T00:00:00+00:00", arguments={"k": "v"})
    step.result = {"count": 1, "leaves": [{"leave_id": "LV-1"}]}
    record = step.to_dict()
    assert record == dataclasses.asdict(step)
    step.error, step.duration_ms = "tool_error", 3.5
    assert record["error"] is None and record["duration_ms"] == 0.0


@pytest.mark.parametrize(
    ("saved", "outcome", "detail"),
    [
        ({"type": "tool", "error": "tool_error"}, "tool_error", None),
        (
            {"type": "tool", "error": "unavailable: MCP connection lost"},
            "unavailable",
            "MCP connection lost",
        ),
        ({"type": "tool", "error": "ValueError: boom"}, "exception", "ValueError: boom"),
        (
            {"type": "model", "error": "the model answered 500"},
            "model_error",
            "the model answered 500",
        ),
        ({"type": "detection", "error": "hit max_tokens"}, "detected", "hit max_tokens"),
        ({"type": "tool", "error": None}, None, None),
    ],
)
def test_a_step_saved_before_outcomes_were_a_closed_set_reads_as_its_outcome_and_reason(
    saved, outcome, detail
):
    from loop.engine import Step

    step = Step.from_dict(
        {"name": "search_leaves", "started_at": "2026-01-01T00:00:00+00:00", **saved}
    )
    assert (step.error, step.detail) == (outcome, detail)
    assert step.error is None or isinstance(step.error, StepOutcome)
