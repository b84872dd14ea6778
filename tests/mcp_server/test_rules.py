"""Every business rule, through the SDK's in-process client."""

from __future__ import annotations

import asyncio
import json
import re
import threading

import anyio.to_thread
import pytest
from sqlalchemy import select

from common.contract import ToolName
from mcp_server.leaves import LeaveService, _search_statement
from mcp_server.storage import AuditEntry
from mcp_server.tools import build_server

from .helpers import Elicitations, connect_to, error_code, find
from .ledger import balance_of, status_of

TOOL_NAMES = {
    "search_leaves",
    "get_leave_balance",
    "create_leave",
    "update_leave_status",
    "cancel_approved_leave",
}


async def test_tools_are_the_trained_names_with_model_readable_schemas(connect):
    async with connect("E001") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOL_NAMES
    for tool in tools.values():
        assert len(tool.description or "") > 40
        for prop in tool.input_schema.get("properties", {}).values():
            assert prop.get("description"), tool.name
    # The confirmation is resolved by the server, never an argument the model could fill in.
    assert set(tools["cancel_approved_leave"].input_schema["properties"]) == {"leave_id"}
    assert tools["cancel_approved_leave"].annotations.destructive_hint is True
    assert tools["search_leaves"].annotations.read_only_hint is True


async def test_no_tool_description_hands_the_model_an_id_to_copy(connect):
    # A real model copied the example ID from a description; the server refused it, but
    # nothing ID-shaped belongs in what the model reads (descriptions, schemas, the output schema).
    async with connect("E001") as client:
        tools = (await client.list_tools()).tools
    for tool in tools:
        readable = json.dumps(
            [tool.description, tool.input_schema, tool.output_schema], ensure_ascii=False
        )
        assert not re.search(r"LV-[0-9a-f]{6}", readable), tool.name


async def test_search_finds_the_family_trip_draft_with_an_unguessable_id(connect):
    async with connect("E001") as client:
        leaves = await find(client, "家庭旅遊")
    assert len(leaves) == 1
    leave = leaves[0]
    assert re.fullmatch(r"LV-[0-9a-f]{6}", leave["leave_id"])
    assert (leave["leave_type"], leave["status"]) == ("特休", "draft")
    assert leave["days"] == 3 and leave["hours"] == 24
    assert leave["next_steps"] == ["submitted"]


async def test_search_matches_type_alias_dates_and_status(connect):
    async with connect("E001") as client:
        approved = await find(client, "", "approved")
        by_alias = await find(client, "annual")
        by_month = await find(client, approved[0]["start_date"][:7])
    assert [leave["status"] for leave in approved] == ["approved"]
    assert {leave["leave_type"] for leave in by_alias} == {"特休"}
    assert approved[0]["leave_id"] in {leave["leave_id"] for leave in by_month}


async def test_search_is_scoped_to_the_caller_and_a_managers_reports(connect):
    async with connect("E001") as client:
        own = await find(client, "")
    async with connect("E002") as client:
        other = await find(client, "家庭旅遊")
    async with connect("M001") as client:
        team = await find(client, "家庭旅遊")
    assert {leave["employee_id"] for leave in own} == {"E001"}
    assert other == []
    assert len(team) == 1 and team[0]["employee_id"] == "E001"


async def test_search_keywords_are_bounded_with_a_clear_refusal(connect):
    async with connect("E001") as client:
        eight = await client.call_tool("search_leaves", {"keyword": "家 庭 旅 遊 去 花 蓮 三"})
        nine = await client.call_tool("search_leaves", {"keyword": "家 庭 旅 遊 去 花 蓮 三 天"})
        long = await client.call_tool("search_leaves", {"keyword": "家" * 101})
    assert not eight.is_error and eight.structured_content["count"] == 1
    assert error_code(nine) == error_code(long) == "keyword_too_long"
    text = nine.content[0].text
    assert "8 個詞" in text and "100 個字元" in text


async def test_a_search_with_an_unknown_status_names_every_status_a_search_takes(connect):
    async with connect("E001") as client:
        refused = await client.call_tool("search_leaves", {"keyword": "", "status": "pending"})
        drafts = await find(client, "", "draft")  # what a model reading the refusal would try
    assert error_code(refused) == "invalid_status"
    text = refused.content[0].text
    assert all(status in text for status in ("draft", "submitted", "approved", "cancelled"))
    assert drafts and {leave["status"] for leave in drafts} == {"draft"}


async def test_an_update_to_an_unknown_status_names_only_the_statuses_an_update_sets(connect):
    async with connect("E001") as client:
        trip = (await find(client, "家庭旅遊"))[0]["leave_id"]
        refused = await client.call_tool(
            "update_leave_status", {"leave_id": trip, "status": "cancelled"}
        )
    assert error_code(refused) == "invalid_status"
    valid = refused.content[0].text.split("可用的狀態：")[1]
    assert valid == "submitted、approved、rejected。"


async def test_calls_the_sdk_refuses_carry_a_code_and_are_counted(connect, metrics):
    """An unknown tool and arguments that fail the input schema never reach a tool; they are
    answered and counted as the rules' refusals are."""
    async with connect("E001") as client:
        unknown = await client.call_tool("delete_leave", {"leave_id": "LV-000000"})
        wrong_type = await client.call_tool("search_leaves", {"keyword": ["家庭旅遊"]})
        missing = await client.call_tool("update_leave_status", {"leave_id": "LV-123456"})
    assert error_code(unknown) == "unknown_tool"
    assert "search_leaves" in unknown.content[0].text and "delete_leave" in unknown.content[0].text
    assert error_code(wrong_type) == error_code(missing) == "invalid_arguments"
    assert "keyword" in wrong_type.content[0].text and "家庭旅遊" not in wrong_type.content[0].text
    assert "status" in missing.content[0].text
    calls = metrics.tool_calls
    assert calls.labels("unknown", "refused")._value.get() == 1
    assert calls.labels("search_leaves", "refused")._value.get() == 1
    assert calls.labels("update_leave_status", "refused")._value.get() == 1
    assert metrics.rule_refusals.labels("malformed_call")._value.get() == 3


def test_every_known_label_value_is_exported_at_zero_from_the_start(metrics):
    """A child born at its first observation already holds 1, and rate() never sees that
    first error; so every known tool, outcome, rule and confirmation outcome starts at 0."""
    exported = {
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in metrics.registry.collect()
        for sample in family.samples
    }
    for tool in (*ToolName, "unknown"):
        for outcome in ("ok", "refused", "declined", "error"):
            key = (("outcome", outcome), ("tool", str(tool)))
            assert ("leave_mcp_tool_calls_total", key) in exported, key
    for rule in ("unknown_id", "wrong_step", "forbidden", "conflict", "declined", "malformed_call"):
        assert ("leave_mcp_rule_refusals_total", (("rule", rule),)) in exported, rule
    for outcome in ("accepted", "declined", "cancelled", "abandoned"):
        assert ("leave_mcp_elicitations_total", (("outcome", outcome),)) in exported, outcome
    count = ("leave_mcp_tool_duration_seconds_count", (("tool", "update_leave_status"),))
    assert count in exported


async def test_balance_lists_every_type_after_approved_deductions(connect):
    async with connect("E001") as client:
        result = await client.call_tool("get_leave_balance", {})
    lines = {b["leave_type"]: b for b in result.structured_content["balances"]}
    assert set(lines) == {"特休", "病假", "事假", "補休"}
    assert lines["特休"]["remaining_days"] == 12  # 14 minus the seeded 2-day approved leave
    assert lines["特休"]["remaining_hours"] == 96


async def test_unknown_id_tells_the_model_to_search_first(connect, metrics):
    async with connect("E001") as client:
        result = await client.call_tool(
            "update_leave_status", {"leave_id": "LV-000000", "status": "submitted"}
        )
    assert error_code(result) == "unknown_leave_id"
    assert "search_leaves" in result.content[0].text
    assert metrics.rule_refusals.labels("unknown_id")._value.get() == 1


async def test_a_tool_call_under_way_is_counted_in_progress_until_it_ends(
    connect, service, metrics, monkeypatch
):
    entered, release = threading.Event(), threading.Event()
    change_status = service.change_status

    def held(*args):  # the write waits, as it would for a locked database
        entered.set()
        release.wait(10)
        return change_status(*args)

    monkeypatch.setattr(service, "change_status", held)
    in_progress = metrics.tool_calls_in_progress.labels("update_leave_status")
    async with connect("E001") as client:
        trip = (await find(client, "家庭旅遊"))[0]["leave_id"]
        call = asyncio.create_task(
            client.call_tool("update_leave_status", {"leave_id": trip, "status": "submitted"})
        )
        assert await anyio.to_thread.run_sync(entered.wait, 10)
        during = in_progress._value.get()
        release.set()
        result = await call
    assert during == 1
    assert not result.is_error, result.content
    assert in_progress._value.get() == 0


@pytest.mark.parametrize("in_place", [True, False])
async def test_reads_run_on_the_event_loop_only_where_they_never_wait_and_writes_never_do(
    connect, service, monkeypatch, in_place
):
    if in_place and not service.db.reads_in_place:
        pytest.skip("reads are made in place on a SQLite file only")
    monkeypatch.setattr(service.db, "reads_in_place", in_place)
    ran_on: dict[str, int] = {}
    for name in ("search", "balance", "create"):
        original = getattr(service, name)

        def recorded(*args, _name=name, _original=original):
            ran_on[_name] = threading.get_ident()
            return _original(*args)

        monkeypatch.setattr(service, name, recorded)
    async with connect("E001") as client:
        await find(client, "")
        assert not (await client.call_tool("get_leave_balance", {})).is_error
        created = await client.call_tool(
            "create_leave",
            {
                "leave_type": "事假",
                "start_date": "2027-03-01",
                "end_date": "2027-03-01",
                "reason": "搬家",
            },
        )
    assert not created.is_error, created.content
    event_loop = threading.get_ident()
    assert (ran_on["search"] == event_loop) is in_place
    assert (ran_on["balance"] == event_loop) is in_place
    assert ran_on["create"] != event_loop  # a write may wait for the lock: never on the loop


async def test_another_employees_leave_is_indistinguishable_from_a_missing_one(connect):
    async with connect("E001") as client:
        trip = (await find(client, "家庭旅遊"))[0]["leave_id"]
    async with connect("E002") as client:
        theirs = await client.call_tool(
            "update_leave_status", {"leave_id": trip, "status": "submitted"}
        )
        missing = await client.call_tool(
            "update_leave_status", {"leave_id": "LV-abcdef", "status": "submitted"}
        )
        cancel = await client.call_tool("cancel_approved_leave", {"leave_id": trip})
    assert error_code(theirs) == error_code(missing) == error_code(cancel) == "unknown_leave_id"
    assert theirs.content[0].text.replace(trip, "X") == missing.content[0].text.replace(
        "LV-abcdef", "X"
    )


async def test_a_skipped_step_is_refused_and_names_the_allowed_step(connect, service):
    async with connect("E001") as client:
        trip = (await find(client, "家庭旅遊"))[0]["leave_id"]
        result = await client.call_tool(
            "update_leave_status", {"leave_id": trip, "status": "approved"}
        )
    assert error_code(result) == "wrong_step"
    assert "submitted" in result.content[0].text
    assert status_of(service, trip) == "draft"


async def test_full_path_submit_then_manager_approves_and_balance_is_deducted(connect, service):
    before = balance_of(service, "E001", "特休")
    async with connect("E001") as client:
        trip = (await find(client, "家庭旅遊"))[0]["leave_id"]
        submitted = await client.call_tool(
            "update_leave_status", {"leave_id": trip, "status": "submitted"}
        )
        again = await client.call_tool(
            "update_leave_status", {"leave_id": trip, "status": "submitted"}
        )
        self_approve = await client.call_tool(
            "update_leave_status", {"leave_id": trip, "status": "approved"}
        )
    assert not submitted.is_error
    assert submitted.structured_content["from_status"] == "draft"
    assert submitted.structured_content["to_status"] == "submitted"
    assert error_code(again) == "wrong_step"
    assert error_code(self_approve) == "forbidden"
    async with connect("M001") as client:
        approved = await client.call_tool(
            "update_leave_status", {"leave_id": trip, "status": "approved"}
        )
    assert not approved.is_error, approved.content
    assert balance_of(service, "E001", "特休") == before - 3
    trail = [(e.from_status, e.to_status, e.actor_id) for e in service.audit_trail(trip)]
    assert trail == [("draft", "submitted", "E001"), ("submitted", "approved", "M001")]


async def test_only_the_owner_submits_and_only_the_manager_decides(connect, service):
    async with connect("E001") as client:
        trip = (await find(client, "家庭旅遊"))[0]["leave_id"]
    async with connect("M001") as client:
        manager_submit = await client.call_tool(
            "update_leave_status", {"leave_id": trip, "status": "submitted"}
        )
    assert error_code(manager_submit) == "forbidden"
    async with connect("E002") as client:
        moving = (await find(client, "搬家"))[0]["leave_id"]
        self_decide = await client.call_tool(
            "update_leave_status", {"leave_id": moving, "status": "rejected"}
        )
    assert error_code(self_decide) == "forbidden"
    async with connect("M001") as client:
        rejected = await client.call_tool(
            "update_leave_status", {"leave_id": moving, "status": "rejected"}
        )
        after = await client.call_tool(
            "update_leave_status", {"leave_id": moving, "status": "approved"}
        )
    assert not rejected.is_error
    assert error_code(after) == "wrong_step"
    assert status_of(service, moving) == "rejected"


async def test_a_manager_cannot_approve_their_own_leave(connect, service):
    async with connect("M001") as client:
        created = await client.call_tool(
            "create_leave",
            {
                "leave_type": "事假",
                "start_date": "2031-03-03",
                "end_date": "2031-03-03",
                "reason": "處理私事",
            },
        )
        leave_id = created.structured_content["leave_id"]
        await client.call_tool("update_leave_status", {"leave_id": leave_id, "status": "submitted"})
        approve = await client.call_tool(
            "update_leave_status", {"leave_id": leave_id, "status": "approved"}
        )
    assert error_code(approve) == "forbidden"
    assert status_of(service, leave_id) == "submitted"


@pytest.mark.parametrize("status", ["cancelled", "draft", "submitted", "rejected", "approved"])
async def test_update_leave_status_can_never_cancel_or_move_an_approved_leave(
    connect, service, status
):
    for employee in ("E001", "M001"):
        async with connect(employee) as client:
            approved = (await find(client, "婚禮"))[0]["leave_id"]
            result = await client.call_tool(
                "update_leave_status", {"leave_id": approved, "status": status}
            )
        assert error_code(result) in {"use_cancel_tool", "wrong_step", "forbidden"}
        assert status_of(service, approved) == "approved"
    assert balance_of(service, "E001", "特休") == 12


async def test_only_the_owner_can_cancel_an_approved_leave(connect, service):
    asked = Elicitations("accept")
    async with connect("M001", asked) as client:
        wedding = (await find(client, "婚禮"))[0]["leave_id"]
        result = await client.call_tool("cancel_approved_leave", {"leave_id": wedding})
    assert error_code(result) == "forbidden"
    assert asked.asked == []  # refused before any question reaches the human
    assert status_of(service, wedding) == "approved"


async def test_cancel_with_accepted_confirmation_restores_the_balance(connect, service, metrics):
    asked = Elicitations("accept")
    async with connect("E001", asked) as client:
        wedding = (await find(client, "婚禮"))[0]["leave_id"]
        result = await client.call_tool("cancel_approved_leave", {"leave_id": wedding})
    assert not result.is_error, result.content
    assert result.structured_content["to_status"] == "cancelled"
    assert len(asked.asked) == 1 and wedding in asked.asked[0].message
    assert status_of(service, wedding) == "cancelled"
    assert balance_of(service, "E001", "特休") == 14
    last = service.audit_trail(wedding)[-1]
    assert (last.from_status, last.to_status, last.confirmation, last.outcome) == (
        "approved",
        "cancelled",
        "accepted",
        "applied",
    )
    assert metrics.elicitations.labels("accepted")._value.get() == 1


@pytest.mark.parametrize(
    ("action", "content", "recorded"),
    [
        ("decline", None, "declined"),
        ("cancel", None, "cancelled"),
        ("accept", {"confirm": False}, "declined"),
    ],
)
async def test_cancel_not_confirmed_changes_nothing_and_is_audited(
    connect, service, action, content, recorded
):
    async with connect("E001", Elicitations(action, content)) as client:
        wedding = (await find(client, "婚禮"))[0]["leave_id"]
        result = await client.call_tool("cancel_approved_leave", {"leave_id": wedding})
        # No detour: after the decline, every other path to the same effect is refused too.
        detours = [
            await client.call_tool("update_leave_status", {"leave_id": wedding, "status": status})
            for status in ("cancelled", "rejected", "draft")
        ]
    assert error_code(result) == f"confirmation_{recorded}"
    assert "不要改用其他工具" in result.content[0].text
    assert all(d.is_error for d in detours)
    assert status_of(service, wedding) == "approved"
    assert balance_of(service, "E001", "特休") == 12
    last = service.audit_trail(wedding)[-1]
    assert (last.confirmation, last.outcome, last.to_status) == (
        recorded,
        "not_applied",
        "approved",
    )


@pytest.mark.parametrize("action", ["accept", "decline", "cancel"])
async def test_an_answered_confirmation_is_never_audited_as_abandoned(connect, service, action):
    import datetime as dt

    from mcp_server.storage import utcnow

    async with connect("E001", Elicitations(action)) as client:
        wedding = (await find(client, "婚禮"))[0]["leave_id"]
        await client.call_tool("cancel_approved_leave", {"leave_id": wedding})
    assert service.audit_abandoned(utcnow() + dt.timedelta(days=1)) == 0


async def test_an_unanswered_confirmation_is_audited_as_abandoned_once(service):
    import datetime as dt

    from mcp_server.storage import utcnow

    service.confirmation_asked("E001", "LV-000000", "cancel_approved_leave")
    assert service.audit_abandoned(utcnow() - dt.timedelta(minutes=1)) == 0  # not yet stale
    assert service.audit_abandoned(utcnow() + dt.timedelta(seconds=1)) == 1
    assert service.audit_abandoned(utcnow() + dt.timedelta(seconds=1)) == 0
    entry = service.audit_trail("LV-000000")[-1]
    assert (entry.actor_id, entry.confirmation, entry.outcome) == (
        "E001",
        "abandoned",
        "not_applied",
    )


async def test_cancel_on_a_leave_that_is_not_approved_asks_nothing(connect, service):
    asked = Elicitations("accept")
    async with connect("E001", asked) as client:
        trip = (await find(client, "家庭旅遊"))[0]["leave_id"]
        result = await client.call_tool("cancel_approved_leave", {"leave_id": trip})
    assert error_code(result) == "not_cancellable"
    assert asked.asked == []
    assert status_of(service, trip) == "draft"


async def test_create_leave_makes_an_audited_draft(connect, service):
    async with connect("E002") as client:
        result = await client.call_tool(
            "create_leave",
            {
                "leave_type": "sick",
                "start_date": "2031-05-05",
                "end_date": "2031-05-07",
                "reason": "感冒發燒",
            },
        )
    view = result.structured_content
    assert not result.is_error
    assert (view["status"], view["leave_type"], view["days"]) == ("draft", "病假", 3)
    assert [e.tool for e in service.audit_trail(view["leave_id"])] == ["create_leave"]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ({"start_date": "2031/05/05"}, "invalid_date"),
        ({"start_date": "2031-02-30"}, "invalid_date"),
        ({"start_date": "2031-05-09", "end_date": "2031-05-05"}, "end_before_start"),
        ({"start_date": "2031-05-10", "end_date": "2031-05-11"}, "no_working_days"),
        ({"leave_type": "度假"}, "invalid_leave_type"),
        ({"reason": "   "}, "invalid_reason"),
    ],
)
async def test_create_leave_rejects_bad_input_with_a_clear_code(connect, service, args, code):
    base = {
        "leave_type": "特休",
        "start_date": "2031-05-05",
        "end_date": "2031-05-06",
        "reason": "旅行",
    }
    async with connect("E001") as client:
        result = await client.call_tool("create_leave", {**base, **args})
    assert error_code(result) == code
    with service.db.read() as s:
        assert s.scalars(select(AuditEntry).where(AuditEntry.tool == "create_leave")).all() == []


async def test_create_leave_refuses_overlap_with_a_live_leave(connect):
    async with connect("E001") as client:
        wedding = (await find(client, "婚禮"))[0]
        result = await client.call_tool(
            "create_leave",
            {
                "leave_type": "事假",
                "start_date": wedding["start_date"],
                "end_date": wedding["start_date"],
                "reason": "重疊測試",
            },
        )
    assert error_code(result) == "overlap"
    assert wedding["leave_id"] in result.content[0].text


async def test_missing_arguments_are_an_error_result_not_a_crash(connect):
    async with connect("E001") as client:
        result = await client.call_tool("update_leave_status", {"leave_id": "LV-123456"})
    assert error_code(result) == "invalid_arguments"


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("search_leaves", {"keyword": "\ud800"}, "keyword"),
        (
            "create_leave",
            {
                "leave_type": "事假",
                "start_date": "2031-03-03",
                "end_date": "2031-03-03",
                "reason": "家裡有事\udfff",
            },
            "reason",
        ),
        ("update_leave_status", {"leave_id": "LV-\ud800", "status": "submitted"}, "leave_id"),
    ],
)
async def test_a_lone_surrogate_in_an_argument_is_invalid_arguments_naming_it(
    connect, metrics, tool, arguments, field
):
    async with connect("E001") as client:
        result = await client.call_tool(tool, arguments)
        still_served = await client.call_tool("get_leave_balance", {})
    assert error_code(result) == "invalid_arguments", result
    assert field in result.content[0].text and "surrogate" in result.content[0].text
    assert metrics.tool_calls.labels(tool, "refused")._value.get() == 1
    assert not still_served.is_error


async def test_unexpected_exceptions_do_not_leak_internals(connect, service, monkeypatch):
    def explode(*_args, **_kwargs):
        raise RuntimeError("password=hunter2 at /srv/secret.py line 42")

    monkeypatch.setattr(service, "search", explode)
    async with connect("E001") as client:
        result = await client.call_tool("search_leaves", {"keyword": "x"})
    assert error_code(result) == "internal_error"
    assert "hunter2" not in result.content[0].text and "secret" not in result.content[0].text


async def test_messages_can_be_english(service, metrics):
    english = build_server(service, metrics, language="en")
    async with connect_to(english, "E001") as client:
        result = await client.call_tool(
            "update_leave_status", {"leave_id": "LV-000000", "status": "submitted"}
        )
    assert "Call search_leaves first" in result.content[0].text


def test_compare_and_set_refuses_a_stale_status(service):
    from mcp_server.messages import Refusal
    from mcp_server.storage import Leave

    leave_id = service.search("E002", "搬家", None)[0].leave_id
    with pytest.raises(Refusal) as refused, service.db.write() as s:
        leave = s.get(Leave, leave_id)
        LeaveService._compare_and_set(s, leave, "draft", "submitted")  # it is "submitted"
    assert refused.value.code == "conflict"
    assert status_of(service, leave_id) == "submitted"


async def test_search_treats_like_wildcards_as_characters(connect):
    async with connect("E001") as client:
        assert await find(client, "%") == []
        assert await find(client, "_") == []
        assert len(await find(client, "")) == 4


def test_search_matches_wildcards_and_the_escape_character_literally_in_every_word(service):
    """Search words are bound, escaped values: "%", "_" and "/" match only themselves, and
    a query of several words (with a type alias among them) keeps every word's own value."""
    created = service.create("E001", "病假", "2041-03-05", "2041-03-05", "看診 50%/半天_上午")
    assert [v.leave_id for v in service.search("E001", "50%/半天_", None)] == [created.leave_id]
    assert [v.leave_id for v in service.search("E001", "/ sick 2041-03", None)] == [
        created.leave_id
    ]
    assert service.search("E001", "50%/半天_ annual", None) == []  # 病假 is not 特休
    assert [v.leave_id for v in service.search("E001", "上午", "draft")] == [created.leave_id]
    assert service.search("E001", "上午", "approved") == []
    assert service.search("E001", "5_%", None) == []  # "_" is not "any one character"


@pytest.mark.parametrize(("words", "with_status"), [(0, False), (1, False), (2, True)])
def test_a_search_reads_the_leaves_of_the_actor_and_reports_by_index_not_every_leave(
    service, words, with_status
):
    """What a search costs follows what the actor may see, not the size of the company: the
    leaves are read through their owner's index, the owners through the employees' keys."""
    if service.db.engine.dialect.name != "sqlite":
        pytest.skip("SQLite's query plan; PostgreSQL plans by its statistics of the data")
    sql = str(_search_statement(words, with_status).compile(dialect=service.db.engine.dialect))
    with service.db.engine.connect() as connection:
        plan = [
            row[-1]
            for row in connection.exec_driver_sql(
                f"EXPLAIN QUERY PLAN {sql}", (None,) * sql.count("?")
            )
        ]
    assert not [step for step in plan if step.startswith("SCAN")], plan
    assert "SEARCH leaves USING INDEX ix_leaves_employee_id (employee_id=?)" in plan, plan


def test_a_search_by_an_employee_who_does_not_exist_is_an_error_not_an_empty_list(service):
    with pytest.raises(LookupError):
        service.search("E404", "", None)
    assert service.search("E001", "沒有這種假", None) == []  # an existing one: just nothing
