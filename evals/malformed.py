"""Which tool call the model wrote wrong, which argument, and how: read from a run record's
steps (the loop's own outcomes and detections, and the MCP server's refusals of arguments)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from common.contract import RefusalCode, StepKind, StepOutcome, ToolName
from common.runs_protocol import DetectionKind, Step

# Each tool's arguments (all strings) → required; tests hold it to mcp_server/tools.py.
TOOL_ARGUMENTS: dict[str, dict[str, bool]] = {
    ToolName.SEARCH_LEAVES: {"keyword": True, "status": False},
    ToolName.GET_LEAVE_BALANCE: {},
    ToolName.CREATE_LEAVE: {
        "leave_type": True,
        "start_date": True,
        "end_date": True,
        "reason": True,
    },
    ToolName.UPDATE_LEAVE_STATUS: {"leave_id": True, "status": True},
    ToolName.CANCEL_APPROVED_LEAVE: {"leave_id": True},
}
ALL_ARGUMENTS = "(arguments)"
NO_ARGUMENT = "-"


@dataclass(frozen=True)
class MalformedCall:
    tool: str
    argument: str
    how: str  # the kind of mistake, the same words each time (the breakdown counts them)
    value: str = ""  # what was written, where that helps: the bad date, the unknown value

    @property
    def kind(self) -> str:
        where = self.tool if self.argument == NO_ARGUMENT else f"{self.tool}.{self.argument}"
        return f"{where}: {self.how}"

    def __str__(self) -> str:
        return f"{self.kind} {self.value}" if self.value else self.kind


def malformed_calls(steps: list[Step]) -> list[MalformedCall]:
    return [call for step in steps for call in _of(step)]


def _of(step: Step) -> list[MalformedCall]:
    if step.type == StepKind.DETECTION:
        if step.name == DetectionKind.TOOL_CALL_IN_CONTENT:
            return [MalformedCall("(answer text)", NO_ARGUMENT, "tool call written as text")]
        return []
    if step.type != StepKind.TOOL:
        return []
    if step.error == StepOutcome.INVALID_ARGUMENTS:
        return [MalformedCall(step.name, ALL_ARGUMENTS, "unparseable JSON", step.detail or "")]
    if step.error == StepOutcome.UNKNOWN_TOOL:
        return [MalformedCall(step.name, NO_ARGUMENT, "no such tool")]
    code = step.refusal()
    arguments = step.arguments if isinstance(step.arguments, dict) else {}
    match code:
        case RefusalCode.UNKNOWN_TOOL:
            return [MalformedCall(step.name, NO_ARGUMENT, "no such tool")]
        case RefusalCode.INVALID_ARGUMENTS:
            return _against_schema(step.name, arguments)
        case RefusalCode.INVALID_DATE:
            bad = [k for k in ("start_date", "end_date") if not _is_date(arguments.get(k))]
            return [MalformedCall(step.name, k, "bad date (not YYYY-MM-DD)", repr(arguments.get(k)))
                    for k in bad or ["start_date"]]  # fmt: skip
        case RefusalCode.END_BEFORE_START:
            return [MalformedCall(step.name, "end_date", "before start_date")]
        case RefusalCode.INVALID_LEAVE_TYPE:
            value = arguments.get("leave_type")
            return [MalformedCall(step.name, "leave_type", "unknown enum value", repr(value))]
        case RefusalCode.INVALID_STATUS:
            value = arguments.get("status")
            return [MalformedCall(step.name, "status", "unknown enum value", repr(value))]
        case RefusalCode.INVALID_REASON:
            return [MalformedCall(step.name, "reason", "empty or over 200 characters")]
        case RefusalCode.KEYWORD_TOO_LONG:
            return [MalformedCall(step.name, "keyword", "too long")]
    return []


def _against_schema(tool: str, arguments: dict[str, Any]) -> list[MalformedCall]:
    """What the server's input schema refused, found again from the arguments (its message
    names the fields but, on purpose, never the values)."""
    expected = TOOL_ARGUMENTS.get(tool, {})
    missing = [name for name, required in expected.items() if required and name not in arguments]
    found = [MalformedCall(tool, name, "missing required") for name in missing]
    found += [
        MalformedCall(tool, name, "wrong type (not a string)", type(value).__name__)
        for name, value in arguments.items()
        if name in expected and not isinstance(value, str) and value is not None
    ]
    return found or [MalformedCall(tool, ALL_ARGUMENTS, "do not fit the input schema")]


def _is_date(value: Any) -> bool:
    try:
        dt.date.fromisoformat(str(value).strip())
    except ValueError:
        return False
    return True


def breakdown(calls: list[MalformedCall]) -> dict[str, int]:
    """ "tool.argument: how" (the value left out) → how many."""
    counts: dict[str, int] = {}
    for call in calls:
        counts[call.kind] = counts.get(call.kind, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
