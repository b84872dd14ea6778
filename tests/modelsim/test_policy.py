"""The scripted leave-copilot policy and the token counter, in memory."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from common import tokens
from modelsim import policy

from .helpers import LEAVE_TOOLS, SEED_REQUEST, SYSTEM

DRAFT = {
    "leave_id": "LV-1a2b3c",
    "employee_id": "E001",
    "employee_name": "王小明",
    "leave_type": "特休",
    "start_date": "2026-12-28",
    "end_date": "2026-12-30",
    "days": 3.0,
    "hours": 24.0,
    "status": "draft",
    "reason": "家庭旅遊，去花蓮三天",
    "next_steps": ["submitted"],
}
APPROVED = {**DRAFT, "leave_id": "LV-9f8e7d", "status": "approved", "next_steps": []}


class Conversation:
    """Builds a transcript the way an agent loop would, one decision at a time."""

    def __init__(self, request: str, tools=LEAVE_TOOLS, history=()) -> None:
        self.tools = tools
        self.messages = [{"role": "system", "content": SYSTEM}, *history]
        self.messages.append({"role": "user", "content": request})
        self.count = 0

    def step(self) -> policy.Decision:
        return policy.decide(policy.read_turn(self.messages, self.tools))

    def answer(self, decision: policy.Decision, *results: str) -> None:
        calls = []
        for call in decision.tool_calls:
            self.count += 1
            calls.append(
                {
                    "id": f"call-{self.count}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
            )
        self.messages.append({"role": "assistant", "content": "", "tool_calls": calls})
        for call, result in zip(calls, results, strict=True):
            self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})


def search_result(*leaves) -> str:
    return json.dumps({"count": len(leaves), "leaves": list(leaves)}, ensure_ascii=False)


def test_seed_request_searches_then_submits_the_real_id_then_answers():
    chat = Conversation(SEED_REQUEST)
    first = chat.step()
    assert first.tool_calls == (policy.ToolCall("search_leaves", {"keyword": "家庭旅遊"}),)
    chat.answer(first, search_result(DRAFT))
    second = chat.step()
    assert second.tool_calls == (
        policy.ToolCall("update_leave_status", {"leave_id": "LV-1a2b3c", "status": "submitted"}),
    )
    chat.answer(
        second,
        json.dumps({"leave_id": "LV-1a2b3c", "from_status": "draft", "to_status": "submitted"}),
    )
    final = chat.step()
    assert final.tool_calls == ()
    assert final.text == "已將 LV-1a2b3c 送出審核。"


def test_the_same_conversation_gives_the_same_decision():
    assert Conversation(SEED_REQUEST).step() == Conversation(SEED_REQUEST).step()


def test_query_summarises_what_the_search_found():
    chat = Conversation("查一下我的特休假單")
    first = chat.step()
    assert first.tool_calls[0].name == "search_leaves"
    assert first.tool_calls[0].arguments == {"keyword": "特休"}
    chat.answer(first, search_result(DRAFT, APPROVED))
    final = chat.step()
    assert "找到 2 張假單" in final.text and "LV-9f8e7d" in final.text


def test_balance_question_calls_the_balance_tool_then_reports_it():
    chat = Conversation("我的特休還有幾天？")
    first = chat.step()
    assert first.tool_calls == (policy.ToolCall("get_leave_balance", {}),)
    balance = {"balances": [{"leave_type": "特休", "remaining_days": 12, "remaining_hours": 96}]}
    chat.answer(first, json.dumps(balance, ensure_ascii=False))
    assert "特休 12 天" in chat.step().text


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (
            json.dumps(
                {"leave_id": "LV-9f8e7d", "from_status": "approved", "to_status": "cancelled",
                 "restored_days": 3}
            ),
            "已取消假單 LV-9f8e7d",
        ),
        ("[工具執行失敗] 使用者拒絕取消假單 LV-9f8e7d，假單維持已核准，沒有任何變更。", "維持已核准"),
    ],
)  # fmt: skip
def test_cancel_searches_then_cancels_and_reports_the_confirmation(result, expected):
    chat = Conversation("幫我取消家庭旅遊那張已核准的假")
    first = chat.step()
    chat.answer(first, search_result(DRAFT, APPROVED))
    second = chat.step()
    assert second.tool_calls == (
        policy.ToolCall("cancel_approved_leave", {"leave_id": "LV-9f8e7d"}),
    )
    chat.answer(second, result)
    final = chat.step()
    assert final.tool_calls == () and expected in final.text


def test_a_tool_error_is_explained_not_retried():
    chat = Conversation(SEED_REQUEST)
    first = chat.step()
    chat.answer(first, search_result(DRAFT))
    second = chat.step()
    chat.answer(second, "[工具執行失敗] 找不到假單 LV-1a2b3c。請先呼叫 search_leaves 查詢。")
    final = chat.step()
    assert final.tool_calls == ()
    assert "找不到假單" in final.text


def test_nothing_found_is_said_plainly():
    chat = Conversation("把我那張環島旅行的特休送出審核")
    first = chat.step()
    assert first.tool_calls[0].arguments == {"keyword": "環島旅行"}
    chat.answer(first, search_result())
    assert "找不到符合「環島旅行」" in chat.step().text


def test_a_request_it_does_not_understand_gets_text_without_tools():
    decision = Conversation("今天天氣如何？").step()
    assert decision.tool_calls == () and "差勤助手" in decision.text


def test_it_only_calls_tools_the_request_offers():
    only_search = [t for t in LEAVE_TOOLS if t["function"]["name"] == "search_leaves"]
    chat = Conversation(SEED_REQUEST, tools=only_search)
    first = chat.step()
    chat.answer(first, search_result(DRAFT))
    final = chat.step()
    assert final.tool_calls == () and "update_leave_status" in final.text
    assert Conversation(SEED_REQUEST, tools=[]).step().tool_calls == ()


def test_english_requests_get_english_answers():
    chat = Conversation("Please submit my 家庭旅遊 leave".replace("家庭旅遊", "family"))
    first = chat.step()
    assert first.tool_calls[0].name == "search_leaves"
    chat.answer(first, search_result())
    assert chat.step().text.startswith("No leave matches")


def test_a_follow_up_uses_the_leave_named_earlier_in_the_session():
    history = [
        {"role": "user", "content": "查一下家庭旅遊的假單"},
        {"role": "assistant", "content": "找到 1 張假單：LV-1a2b3c（特休，草稿）。"},
    ]
    decision = Conversation("剛剛那張也送出審核", history=history).step()
    assert decision.tool_calls == (
        policy.ToolCall("update_leave_status", {"leave_id": "LV-1a2b3c", "status": "submitted"}),
    )


def test_token_counts_follow_the_documented_rules():
    assert tokens.count("家庭旅遊") == 4
    assert tokens.count("leave") == 2  # started blocks of 4 letters
    assert tokens.count("2026") == 2  # started blocks of 3 digits
    assert tokens.count("a, b!") == 4
    assert tokens.count("   ") == 0
    text = "把我那張 family trip 特休 LV-7f3a91 送出審核。"
    assert "".join(tokens.split(text)) == text


def test_a_search_and_balance_batch_is_decided_by_the_search():
    chat = Conversation(SEED_REQUEST)
    batch = policy.Decision(
        tool_calls=(
            policy.ToolCall("search_leaves", {"keyword": "家庭旅遊"}),
            policy.ToolCall("get_leave_balance", {}),
        )
    )
    chat.answer(batch, search_result(DRAFT), json.dumps({"balances": []}))
    decision = chat.step()
    assert decision.tool_calls == (
        policy.ToolCall("update_leave_status", {"leave_id": "LV-1a2b3c", "status": "submitted"}),
    )


@pytest.mark.parametrize(
    "result",
    [
        json.dumps([DRAFT], ensure_ascii=False),  # a list where the search answers an object
        json.dumps({"leaves": [{"leave_id": "LV-1a2b3c"}]}),  # a leave without its fields
        json.dumps({"leaves": "none"}),
        json.dumps({"balances": [{"leave_type": "特休"}]}),
    ],
)
def test_a_tool_result_not_shaped_as_the_tools_answer_gets_an_answer_not_a_failure(result):
    chat = Conversation("查一下我的特休假單" if "balances" not in result else "我的特休還有幾天？")
    chat.answer(chat.step(), result)
    final = chat.step()
    assert final.tool_calls == ()
    assert final.text == "我讀不懂工具回傳的內容，請查詢假單確認目前的狀態。"


MONDAY = dt.date(2026, 12, 7)  # a Monday
WEDNESDAY = MONDAY + dt.timedelta(days=2)


@pytest.mark.parametrize(
    ("request_text", "days"),
    [
        ("下週一", ["2026-12-14"]),
        ("下禮拜三到下周五", ["2026-12-16", "2026-12-18"]),
        ("下下週一", ["2026-12-21"]),
        ("這週五", ["2026-12-11"]),
        ("明天和後天", ["2026-12-10", "2026-12-11"]),
        ("next Monday", ["2026-12-14"]),
        ("2027-01-04 到 2027/1/5", ["2027-01-04", "2027-01-05"]),
        # a date with no year is the next one of that name
        ("1月4日", ["2027-01-04"]),
        ("12/24", ["2026-12-24"]),
        ("2月30日", []),
    ],
)
def test_dates_are_read_as_a_person_writes_them(request_text, days):
    found = policy.find_dates(request_text, today=WEDNESDAY)
    assert [d.isoformat() for d in found] == days


def test_a_new_leave_with_relative_dates_and_an_aliased_type():
    chat = Conversation("Please book sick leave for next Monday, reason: dentist appointment")
    (call,) = chat.step().tool_calls
    monday = policy.find_dates("下週一")[0].isoformat()
    assert call.name == "create_leave"
    assert call.arguments == {"leave_type": "病假", "start_date": monday, "end_date": monday,
                              "reason": "dentist appointment"}  # fmt: skip


def test_dates_and_a_leave_type_without_a_known_verb_are_a_new_leave():
    # 清 for 請: no verb it knows, but a day and a leave type say what is asked
    assert policy.detect_intent("幫我清下周四的事假") == "create"
    assert policy.detect_intent("我的事假") == "query"


def test_a_status_named_in_a_question_filters_the_search_and_asks_no_change():
    chat = Conversation("列出我已核准的假")
    assert chat.step().tool_calls[0].arguments == {"keyword": "", "status": "approved"}
    # without a word that asks to look, 核准 still asks for an approval
    assert policy.detect_intent("核准王小明家庭旅遊那張假") == "approve"
    assert policy.detect_intent("直接把剛剛那張的狀態改成已取消") == "cancel"


@pytest.mark.parametrize(
    "request_text",
    ["家庭旅遊那張幫我送審吧", "把家庭旅遊的假單送出審合", "幫我把家庭旅遊那張 leave submit 出去",
     "您好，麻煩將我家庭旅遊的特休假單送出審核，謝謝。"],
)  # fmt: skip
def test_the_leave_is_found_by_its_reason_however_the_request_is_worded(request_text):
    assert Conversation(request_text).step().tool_calls[0].arguments == {"keyword": "家庭旅遊"}
