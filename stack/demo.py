"""The seed scenarios, driven through the loop's HTTP API, with each run's step timeline."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from common import sse
from common.contract import step_failed

EMPLOYEE = "demo-token-employee"


@dataclass(frozen=True)
class Scenario:
    title: str
    request: str
    confirm: str | None  # how the demo answers a confirmation (None: none expected)
    expect_tools: tuple[str, ...]
    expect_in_answer: str


SCENARIOS = (
    Scenario(
        "Submit the 家庭旅遊 draft (search first, then the real id)",
        "把我那張家庭旅遊的特休送出審核",
        None,
        ("search_leaves", "update_leave_status"),
        "送出審核",
    ),
    Scenario("Query", "查一下我的假單", None, ("search_leaves",), "找到"),
    Scenario(
        "Cancel an approved leave — the person declines",
        "取消我表妹婚禮那張假",
        "decline",
        ("search_leaves", "cancel_approved_leave"),
        "維持已核准",
    ),
    Scenario(
        "Cancel an approved leave — the person accepts",
        "取消我表妹婚禮那張假",
        "accept",
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
    "confirmation_declined": "declined by the user: nothing changed",
    "confirmation_cancelled": "not confirmed: nothing changed",
}


def stream_run(
    http: httpx.Client, request: str, answer: str | None
) -> tuple[dict[str, Any], list[Confirmation]]:
    """One streamed run; answers its confirmations with `answer`. Returns (final, what was
    asked in which tool call)."""
    asked: list[Confirmation] = []
    under_way: list[str] = []  # tool calls started and not finished, oldest first
    run_id = ""
    with http.stream("POST", "/v1/runs", json={"input": request, "stream": True}) as response:
        response.raise_for_status()
        for event in sse.events(response.iter_lines()):
            kind, data = event.event, event.json()
            if kind == "run.started":
                run_id = data["id"]
            elif kind == "tool.started":
                under_way.append(data["tool_call_id"])
            elif kind == "tool.finished" and data["tool_call_id"] in under_way:
                under_way.remove(data["tool_call_id"])
            elif kind == "confirmation.requested":
                given = answer or "decline"
                call = under_way[-1] if under_way else None
                asked.append(Confirmation(call, data["message"], given))
                http.post(
                    f"/v1/runs/{run_id}/confirmations/{data['confirmation_id']}",
                    json={"action": given},
                ).raise_for_status()
            elif kind == "run.finished":
                return data, asked
    raise RuntimeError("the stream ended without run.finished")


def timeline(final: dict[str, Any], asked: Sequence[Confirmation] = ()) -> list[str]:
    """A line per step, with the confirmations asked inside a tool call under that call."""
    lines: list[str] = []
    steps = final["steps"]
    if not steps:
        return lines
    by_call: dict[str | None, list[Confirmation]] = {}
    for confirmation in asked:
        by_call.setdefault(confirmation.tool_call_id, []).append(confirmation)
    origin = _seconds(steps[0]["started_at"])
    for step in steps:
        offset = (_seconds(step["started_at"]) - origin) * 1000
        questions = by_call.pop(step["tool_call_id"], []) if step["type"] == "tool" else []
        if step["type"] == "model":
            calls = ", ".join(step["result"]["tool_calls"]) if step["result"] else ""
            what = f"model  → {calls or 'answer'}"
            extra = f"{step['prompt_tokens']}+{step['completion_tokens']} tokens"
        elif step["type"] == "tool":
            arguments = json.dumps(step["arguments"], ensure_ascii=False)
            what = f"tool   {step['name']} {arguments}"
            extra = _tool_outcome(step, questions)
        else:
            what, extra = f"check  {step['name']}", _said(step)
        lines.append(f"  {offset:7.1f} ms  {what:<58} {step['duration_ms']:7.1f} ms  {extra}")
        for confirmation in questions:
            lines.append(f"{'':13}confirmation asked: {confirmation.question}")
            lines.append(f"{'':13}answered: {confirmation.answer}")
    for confirmation in (c for waiting in by_call.values() for c in waiting):  # no step named
        lines.append(f"  confirmation asked: {confirmation.question}")
        lines.append(f"  answered: {confirmation.answer}")
    return lines


def _tool_outcome(step: dict[str, Any], questions: list[Confirmation]) -> str:
    """✓, ✗ and the error, or what the person's answer came to: a declined confirmation is
    what the person wanted, not a failed call."""
    if not step_failed(step["error"]):
        done = "✓ confirmed by the user" if questions else "✓"
        return f"{done} ({step['error']})" if step["error"] else done
    result = step["result"] if isinstance(step["result"], dict) else {}
    code = (result.get("error") or {}).get("code")
    if questions and code in DECLINED_CODES:
        return f"✓ {DECLINED_CODES[code]}"
    return f"✗ {_said(step)}"


def _said(step: dict[str, Any]) -> str:
    """A step's outcome and its reason, as one line."""
    return ": ".join(part for part in (step["error"], step.get("detail")) if part)


def _seconds(iso: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(iso).timestamp()


def run_scenarios(loop_url: str, token: str = EMPLOYEE) -> bool:
    """Print every scenario's timeline and answer; True when each did what it should."""
    ok = True
    with httpx.Client(
        base_url=loop_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as http:
        for number, scenario in enumerate(SCENARIOS, 1):
            print(f"\n[{number}] {scenario.title}\n    「{scenario.request}」")
            final, asked = stream_run(http, scenario.request, scenario.confirm)
            for line in timeline(final, asked):
                print(line)
            tools = tuple(s["name"] for s in final["steps"] if s["type"] == "tool")
            passed = (
                final["status"] == "completed"
                and tools == scenario.expect_tools
                and scenario.expect_in_answer in final["answer"]
            )
            ok = ok and passed
            usage = final["usage"]
            print(
                f"    answer: {final['answer']}\n    [{final['status']}, {final['turns']} turns, "
                f"{usage['prompt_tokens']}+{usage['completion_tokens']} tokens]"
                + ("" if passed else "   ← NOT AS EXPECTED")
            )
    return ok
