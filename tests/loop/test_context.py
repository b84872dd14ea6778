"""History and tool results fit the model's context by tokens (the simulator's 4,096)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from .helpers import EMPLOYEE, OTHER, post_run

CONTEXT = 4096  # SIM_MAX_MODEL_LEN's default
ANSWER_RESERVE = 512  # LOOP_MAX_TOKENS is unset


def add_sick_leaves(stack, employee_id: str, how_many: int, first_day: dt.date) -> None:
    from mcp_server.storage import Database, Leave

    database = Database(stack.mcp_db_url)
    with database.write() as s:
        for n in range(how_many):
            day = first_day + dt.timedelta(days=7 * n)
            s.add(
                Leave(
                    id=f"LV-{employee_id[-1]}{n:05x}",
                    employee_id=employee_id,
                    leave_type="病假",
                    start_date=day,
                    end_date=day,
                    days=1.0,
                    status="submitted",
                    reason=f"回診第{n:02d}次，醫院在台北市中正區",
                )
            )
    database.dispose()


@pytest.fixture(scope="module")
def crowded(stack):
    """The employee gets a handful of sick leaves (each answer to 「查一下病假」 is long); the
    other employee gets so many that one search result alone would not fit."""
    add_sick_leaves(stack, "E001", 6, dt.date(2036, 1, 7))
    add_sick_leaves(stack, "E002", 30, dt.date(2036, 1, 8))
    return stack


def prompt_sizes(final: dict) -> list[int]:
    return [s["prompt_tokens"] for s in final["steps"] if s["type"] == "model"]


def test_the_same_question_again_and_again_in_one_session_keeps_fitting(crowded):
    finals = [post_run(crowded, {"input": "查一下病假"}).json()]
    for _ in range(3):
        body = {"input": "查一下病假", "session_id": finals[0]["session_id"]}
        finals.append(post_run(crowded, body).json())
    assert [f["status"] for f in finals] == ["completed"] * 4, [f.get("reason") for f in finals]
    assert {f["session_id"] for f in finals} == {finals[0]["session_id"]}
    for final in finals:
        assert "回診" in final["answer"]
        assert all(size <= CONTEXT - ANSWER_RESERVE for size in prompt_sizes(final)), final


def test_a_search_result_too_long_for_the_context_is_cut_and_says_so(crowded):
    from common.credentials import hash_token
    from loop.store import RunStore

    final = post_run(crowded, {"input": "查一下我的假單"}, OTHER).json()
    assert final["status"] == "completed", final
    assert "回診" in final["answer"]
    assert all(size <= CONTEXT - ANSWER_RESERVE for size in prompt_sizes(final)), final
    store = RunStore(crowded.store_url)
    try:
        record = store.sync.get_run(final["id"], hash_token("demo-token-other"))
    finally:
        store.dispose()
    sent = json.loads(next(m["content"] for m in record.messages if m["role"] == "tool"))
    assert 0 < len(sent["leaves"]) < sent["count"] == 20
    assert f"只列出前 {len(sent['leaves'])} 筆（共 20 筆）" in sent["truncated"]
    # The step keeps the whole result: the record loses nothing.
    search = next(s for s in final["steps"] if s["name"] == "search_leaves")
    assert len(search["result"]["leaves"]) == 20


def test_a_request_that_cannot_fit_ends_with_context_overflow_not_a_model_error(crowded):
    final = post_run(crowded, {"input": "假" * 4000}, EMPLOYEE).json()
    assert final["status"] == "failed"
    assert final["reason"].startswith("context_overflow: the prompt needs about"), final
    assert "太長" in final["answer"]
    assert prompt_sizes(final) == []  # the model was not asked


def test_history_goes_oldest_turn_first_and_never_splits_a_call_from_its_result():
    from loop.context import ContextWindow

    def turn(n: int) -> list[dict]:
        call = {"id": f"c{n}", "type": "function", "function": {"name": "s", "arguments": "{}"}}
        return [
            {"role": "user", "content": f"問題{n}" * 50},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": "結果" * 200},
            {"role": "assistant", "content": "答案" * 50},
        ]

    history = turn(1) + turn(2) + turn(3)
    system = {"role": "system", "content": "你是差勤助手。"}
    current = [{"role": "user", "content": "現在呢？"}]
    window = ContextWindow(size=1400, answer_reserve=200)
    prompt = window.fit(system, history, current, 0)
    assert prompt[1:-1] == turn(3)  # whole turns, newest kept
    window.observe(estimated=100, reported=200)  # the model counts twice the estimate
    assert window.fit(system, history, current, 0) == [system, *current]


def test_a_long_result_is_cut_to_valid_json_or_marked_text():
    from common.tokens import count
    from loop.context import CUT_MARK, cap_tool_result

    leaves = [{"leave_id": f"LV-{n:06x}", "reason": "回診" * 20} for n in range(20)]
    data = {"count": 20, "leaves": leaves}
    text = json.dumps(data, ensure_ascii=False)
    assert cap_tool_result(text, data, 10_000) == text
    cut = json.loads(cap_tool_result(text, data, 400))
    assert cut["count"] == 20 and 0 < len(cut["leaves"]) < 20
    assert cut["leaves"] == leaves[: len(cut["leaves"])] and "共 20 筆" in cut["truncated"]
    plain = cap_tool_result("很長的文字" * 200, None, 100)
    assert plain.endswith(CUT_MARK) and count(plain) <= 100
