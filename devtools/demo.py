"""The seed scenarios, driven through the loop's HTTP API, with each run's step timeline."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import assert_never

from common.contract import RefusalCode, StepKind
from common.run_client import RunClient
from common.runs_protocol import (
    AnswerDelta,
    ConfirmAction,
    ConfirmationRequested,
    ConfirmationResolved,
    Detection,
    ModelFinished,
    ModelStarted,
    Run,
    RunEvent,
    RunFinished,
    RunStarted,
    Step,
    ToolFinished,
    ToolStarted,
    WaitingConfirmation,
)
from common.scenarios import CANCEL_ACCEPTED, CANCEL_DECLINED, QUERY_ALL, SUBMIT_DRAFT

EMPLOYEE = "demo-token-employee"


@dataclass(frozen=True)
class Scenario:
    title: str
    request: str
    confirm: ConfirmAction | None  # how the demo answers a confirmation (None: none expected)
    expect_tools: tuple[str, ...]
    expect_in_answer: str


# The seed scenarios (common/scenarios.py), with what the demo expects of each.
SCENARIOS = (
    Scenario(
        "Submit the 家庭旅遊 draft (search first, then the real id)",
        SUBMIT_DRAFT.request,
        SUBMIT_DRAFT.answer,
        ("search_leaves", "update_leave_status"),
        "送出審核",
    ),
    Scenario("Query", QUERY_ALL.request, QUERY_ALL.answer, ("search_leaves",), "找到"),
    Scenario(
        "Cancel an approved leave — the person declines",
        CANCEL_DECLINED.request,
        CANCEL_DECLINED.answer,
        ("search_leaves", "cancel_approved_leave"),
        "維持已核准",
    ),
    Scenario(
        "Cancel an approved leave — the person accepts",
        CANCEL_ACCEPTED.request,
        CANCEL_ACCEPTED.answer,
        ("search_leaves", "cancel_approved_leave"),
        "已取消",
    ),
)


@dataclass(frozen=True)
class Confirmation:
    """A question the run asked the person during a tool call, and the demo's answer."""

    tool_call_id: str | None  # the tool call it was asked in (the one under way)
    question: str
    answer: str


# What a tool step that asked for a confirmation came to, by the code its result carries.
DECLINED_CODES = {
    RefusalCode.CONFIRMATION_DECLINED: "declined by the user: nothing changed",
    RefusalCode.CONFIRMATION_CANCELLED: "not confirmed: nothing changed",
}


async def stream_scenario(
    client: RunClient, request: str, answer: ConfirmAction | None
) -> tuple[Run, list[Confirmation]]:
    """One streamed run; answers its confirmations with `answer` (decline when None). Returns
    (final, what was asked in which tool call)."""
    asked: list[Confirmation] = []
    under_way: list[str] = []  # tool calls started and not finished, oldest first

    def track(event: RunEvent) -> None:
        match event:
            case ToolStarted():
                under_way.append(event.tool_call_id)
            case ToolFinished():
                if event.tool_call_id in under_way:
                    under_way.remove(event.tool_call_id)
            case (
                RunStarted()
                | ModelStarted()
                | AnswerDelta()
                | ModelFinished()
                | Detection()
                | ConfirmationRequested()
                | ConfirmationResolved()
                | RunFinished()
            ):
                pass
            case _:
                assert_never(event)

    async def reply(question: WaitingConfirmation) -> ConfirmAction:
        given = answer or "decline"
        call = under_way[-1] if under_way else None
        asked.append(Confirmation(call, question.message, given))
        return given

    final = await client.run(request, answer=reply, on_event=track)
    return final, asked


def stream_run(
    loop_url: str, request: str, answer: ConfirmAction | None, token: str = EMPLOYEE
) -> tuple[Run, list[Confirmation]]:
    """stream_scenario on a client of its own."""

    async def one() -> tuple[Run, list[Confirmation]]:
        async with RunClient(loop_url, token) as client:
            return await stream_scenario(client, request, answer)

    return asyncio.run(one())


def timeline(final: Run, asked: Sequence[Confirmation] = ()) -> list[str]:
    """A line per step, with the confirmations asked inside a tool call under that call."""
    lines: list[str] = []
    steps = final.steps or []
    if not steps:
        return lines
    by_call: dict[str | None, list[Confirmation]] = {}
    for confirmation in asked:
        by_call.setdefault(confirmation.tool_call_id, []).append(confirmation)
    origin = _seconds(steps[0].started_at)
    for step in steps:
        offset = (_seconds(step.started_at) - origin) * 1000
        questions = by_call.pop(step.tool_call_id, []) if step.type == StepKind.TOOL else []
        if step.type == StepKind.MODEL:
            calls = ", ".join(step.result["tool_calls"]) if step.result else ""
            what = f"model  → {calls or 'answer'}"
            extra = f"{step.prompt_tokens}+{step.completion_tokens} tokens"
        elif step.type == StepKind.TOOL:
            arguments = json.dumps(step.arguments, ensure_ascii=False)
            what = f"tool   {step.name} {arguments}"
            extra = _tool_outcome(step, questions)
        else:
            what, extra = f"check  {step.name}", _said(step)
        lines.append(f"  {offset:7.1f} ms  {what:<58} {step.duration_ms:7.1f} ms  {extra}")
        for confirmation in questions:
            lines.append(f"{'':13}confirmation asked: {confirmation.question}")
            lines.append(f"{'':13}answered: {confirmation.answer}")
    for confirmation in (c for waiting in by_call.values() for c in waiting):  # no step named
        lines.append(f"  confirmation asked: {confirmation.question}")
        lines.append(f"  answered: {confirmation.answer}")
    return lines


def _tool_outcome(step: Step, questions: list[Confirmation]) -> str:
    """✓, ✗ and the error, or what the person's answer came to: a declined confirmation is
    what the person wanted, not a failed call."""
    if not step.failed:
        done = "✓ confirmed by the user" if questions else "✓"
        return f"{done} ({step.error})" if step.error else done
    code = step.refusal()
    if questions and code in DECLINED_CODES:
        return f"✓ {DECLINED_CODES[RefusalCode(code)]}"
    return f"✗ {_said(step)}"


def _said(step: Step) -> str:
    """A step's outcome and its reason, as one line."""
    return ": ".join(part for part in (step.error, step.detail) if part)


def _seconds(iso: str) -> float:
    return dt.datetime.fromisoformat(iso).timestamp()


def run_scenarios(loop_url: str, token: str = EMPLOYEE) -> bool:
    """Print every scenario's timeline and answer; True when each did what it should."""
    return asyncio.run(_run_scenarios(loop_url, token))


async def _run_scenarios(loop_url: str, token: str) -> bool:
    ok = True
    async with RunClient(loop_url, token) as client:
        for number, scenario in enumerate(SCENARIOS, 1):
            print(f"\n[{number}] {scenario.title}\n    「{scenario.request}」")
            final, asked = await stream_scenario(client, scenario.request, scenario.confirm)
            for line in timeline(final, asked):
                print(line)
            passed = (
                final.status == "completed"
                and tuple(final.tools()) == scenario.expect_tools
                and scenario.expect_in_answer in (final.answer or "")
            )
            ok = ok and passed
            print(
                f"    answer: {final.answer}\n    [{final.status}, {final.turns} turns, "
                f"{final.prompt_tokens}+{final.completion_tokens} tokens]"
                + ("" if passed else "   ← NOT AS EXPECTED")
            )
    return ok
