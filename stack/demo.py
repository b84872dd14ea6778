"""The seed scenarios, driven through the loop's HTTP API, with each run's step timeline."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

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


def stream_run(
    http: httpx.Client, request: str, answer: str | None
) -> tuple[dict[str, Any], list[str]]:
    """One streamed run; answers its confirmations with `answer`. Returns (final, questions)."""
    questions: list[str] = []
    run_id, kind = "", ""
    with http.stream("POST", "/v1/runs", json={"input": request, "stream": True}) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                if kind == "run.started":
                    run_id = data["id"]
                elif kind == "confirmation.requested":
                    questions.append(data["message"])
                    http.post(
                        f"/v1/runs/{run_id}/confirmations/{data['confirmation_id']}",
                        json={"action": answer or "decline"},
                    ).raise_for_status()
                elif kind == "run.finished":
                    return data, questions
    raise RuntimeError("the stream ended without run.finished")


def timeline(final: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    steps = final["steps"]
    if not steps:
        return lines
    origin = _seconds(steps[0]["started_at"])
    for step in steps:
        offset = (_seconds(step["started_at"]) - origin) * 1000
        if step["type"] == "model":
            calls = ", ".join(step["result"]["tool_calls"]) if step["result"] else ""
            what = f"model  → {calls or 'answer'}"
            extra = f"{step['prompt_tokens']}+{step['completion_tokens']} tokens"
        elif step["type"] == "tool":
            arguments = json.dumps(step["arguments"], ensure_ascii=False)
            what = f"tool   {step['name']} {arguments}"
            extra = f"✗ {step['error']}" if step["error"] else "✓"
        else:
            what, extra = f"check  {step['name']}", step["error"] or ""
        lines.append(f"  {offset:7.1f} ms  {what:<58} {step['duration_ms']:7.1f} ms  {extra}")
    return lines


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
            final, questions = stream_run(http, scenario.request, scenario.confirm)
            for line in timeline(final):
                print(line)
            for question in questions:
                print(f"    confirmation asked: {question}\n    answered: {scenario.confirm}")
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
