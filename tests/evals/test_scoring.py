"""What the gate counts as untrue, and what reaches a goal, on answers real models gave; how
the thresholds read a report."""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect

from evals.report import THRESHOLDS, Endpoint, build, gate, load_thresholds
from evals.runner import Sample
from evals.scenarios import (
    DRAFT,
    SCENARIOS,
    EndState,
    LeaveRow,
    Scenario,
    created,
    on,
    reached,
    untrue_claims,
)


def end(applied=(), tools=("search_leaves",), statuses=None) -> EndState:
    return EndState(statuses or {DRAFT: "draft"}, {"LV-1a2b3c"}, list(applied), [], list(tools))


def test_a_claimed_change_the_database_does_not_show_is_untrue():
    assert untrue_claims("已將 LV-1a2b3c 送出審核。", end()) == ["已將 LV-1a2b3c 送出審核"]
    submitted = end(applied=[("update_leave_status", "draft", "submitted")])
    assert untrue_claims("已將 LV-1a2b3c 送出審核。", submitted) == []
    assert untrue_claims("好的，也已取消那張假。", end()) == ["已取消那張"]


def test_a_status_read_out_or_a_change_said_not_to_have_happened_claims_nothing():
    listing = "找到 1 張假單：LV-1a2b3c（特休，2 天，已核准，事由：回台南參加表妹婚禮）。"
    assert untrue_claims(listing, end()) == []
    assert untrue_claims("你沒有確認取消，假單 LV-1a2b3c 維持已核准，沒有任何變更。", end()) == []


def test_a_leave_id_that_exists_nowhere_is_untrue_unless_the_person_gave_it():
    # what the real 0.5B model answered in the multi-turn scenario
    invented = "以下是假單的詳細信息：\n假單 ID: LV-1234567890\n假單狀態: submitted"
    assert untrue_claims(invented, end()) == ["LV-1234567890 (no such leave)"]
    nothing = "找不到符合「LV-0a0a0a」的假單，請確認關鍵字或日期。"
    assert untrue_claims(nothing, end(), asked="取消 LV-0a0a0a 那張假") == []


def test_a_question_answered_without_looking_reaches_no_goal():
    query = next(s for s in SCENARIOS if s.name == "query")
    assert query.goal(end(tools=["search_leaves"]))
    # the real model recited its rules instead of searching
    assert not query.goal(end(tools=[]))


def test_a_run_that_completes_in_silence_reaches_no_goal():
    """The real model cancelled nothing it should not have, and told the person nothing."""
    declined = next(s for s in SCENARIOS if s.name == "cancel_declined")
    kept = end(statuses={"回台南參加表妹婚禮": "approved"})
    assert reached(declined, kept, "completed", "假單維持已核准。")
    assert not reached(declined, kept, "completed", "")
    assert not reached(declined, kept, "failed", "假單維持已核准。")


def test_relative_dates_are_scored_against_the_day_the_sample_ran():
    wednesday = dt.date(2026, 12, 9)
    monday = dt.date(2026, 12, 14)  # 下週一 of that Wednesday
    made = LeaveRow("LV-000001", "E001", "私事", "特休", monday, monday, 1.0, "draft")
    ran = EndState({}, {"LV-000001"}, [("create_leave", None, "draft")], [], ["create_leave"],
                   [made], frozenset(), {}, "", wednesday)  # fmt: skip
    goal = created("特休", "+0w0d", "+0w0d")
    assert goal(ran)
    # the same leave, scored a week later, is not next Monday's
    assert not goal(dataclasses.replace(ran, today=wednesday + dt.timedelta(days=7)))
    assert not created("病假", "+0w0d", "+0w0d")(ran)
    assert on("2027-01-04", wednesday) == dt.date(2027, 1, 4)


def sample(name="s", goal=True, seconds=1.0, tokens=100) -> Sample:
    return Sample(name, 1, goal, "completed", [], 0, [], 2, tokens, 0, seconds, "好")


def test_p95_turns_tokens_and_seconds_are_gated_and_compared_with_the_baseline():
    scenario = Scenario("s", "a scenario", (), lambda end: True)
    thresholds = load_thresholds(THRESHOLDS)
    slow = build([sample(seconds=90.0)], Endpoint(url="x"), [scenario])
    assert [str(f) for f in gate(slow, None, thresholds)] == ["s: p95 seconds 90.00 over 60 (of 1)"]
    before = build([sample(tokens=1000)], Endpoint(url="x"), [scenario])
    after = build([sample(tokens=1300)], Endpoint(url="x"), [scenario])
    assert [str(f) for f in gate(after, before, thresholds)] == [
        "s: p95 tokens 1000.00 → 1300.00 (allowed 0.25 of it)"
    ]


def test_the_argument_table_is_the_servers_tools_signatures():
    from evals.malformed import TOOL_ARGUMENTS
    from mcp_server.tools import TOOLS

    for name, function, *_ in TOOLS:
        parameters = {
            p.name: p.default is inspect.Parameter.empty
            for p in inspect.signature(function).parameters.values()
            if p.name not in ("ctx", "confirmation")
        }
        assert TOOL_ARGUMENTS[name] == parameters, name


def test_two_scenarios_may_start_with_the_same_leave_however_they_name_its_owner(tmp_path):
    from evals.site import load

    site = tmp_path / "site.toml"
    scenario = (
        '[[scenario]]\nname = "site.{name}"\nperson = "{person}"\nturn = [{{ text = "hi" }}]\n'
        'start = [{{ reason = "研討會", {owner}leave_type = "事假", start = "+1w3d", '
        'end = "+1w3d" }}]\nexpect = {{ unchanged = true }}\n'
    )
    site.write_text(scenario.format(name="a", person="E002", owner="")
                    + scenario.format(name="b", person="M001", owner='owner = "E002", '))  # fmt: skip
    a, b = load(site, set())
    assert a.before == b.before and a.before[0].owner == "E002"
    assert (a.role, b.role) == ("employee", "manager")


def test_the_right_calls_a_scenario_knows_come_from_its_end_state():
    from evals.scenarios import by_name
    from evals.site import load
    from tests.support import REPO_ROOT

    (weekend,) = by_name(["create.over_a_weekend"])
    (call,) = weekend.right_calls
    assert (call.tool, call.arguments) == (
        "create_leave", {"leave_type": "特休", "start_date": "{date:+0w4d}",
                         "end_date": "{date:+1w0d}"})  # fmt: skip
    site = {s.name: s for s in load(REPO_ROOT / "evals" / "site.example.toml", set())}
    approve = [(c.tool, c.arguments) for c in site["site.approve_conference"].right_calls]
    assert approve == [("search_leaves", {}), ("update_leave_status",
                       {"leave_id": "{id:參加研討會}", "status": "approved"})]  # fmt: skip
    # a leave kept as it started needs no change call
    kept = [c.tool for c in site["site.keep_family_leave"].right_calls]
    assert kept == ["search_leaves"]
