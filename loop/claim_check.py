"""Whether a finished run's answer claims a change none of its own tool calls made.

The words that claim a change are the release gate's (common.claims: one checker for both);
what backs a claim here is the run's own successful writes, read from its steps, since the loop
sees no other record of what changed. A run answering 「已送出審核」 with nothing submitted is
flagged on its record, counted, and left out of the training export.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from common.claims import unverified_claims
from common.contract import LeaveStatus, StepKind, ToolName
from common.runs_protocol import Step

# The status each write leaves its leave in when it succeeds, from its arguments, for a result
# that does not say (the servers' results carry it: to_status, or the new leave's status).
_WRITES: dict[str, Callable[[dict[str, Any]], Any]] = {
    ToolName.CREATE_LEAVE: lambda _arguments: LeaveStatus.DRAFT,
    ToolName.UPDATE_LEAVE_STATUS: lambda arguments: arguments.get("status"),
    ToolName.CANCEL_APPROVED_LEAVE: lambda _arguments: LeaveStatus.CANCELLED,
}


def changes_made(steps: Iterable[Step]) -> set[str]:
    """The statuses the run's successful writes left a leave in."""
    made: set[str] = set()
    for step in steps:
        if step.type != StepKind.TOOL or step.name not in _WRITES or step.failed:
            continue
        result = step.result if isinstance(step.result, dict) else {}
        arguments = step.arguments if isinstance(step.arguments, dict) else {}
        status = result.get("to_status") or result.get("status") or _WRITES[step.name](arguments)
        if isinstance(status, str):
            made.add(status)
    return made


def claims_unverified(answer: str | None, steps: Iterable[Step]) -> list[str]:
    """The changes `answer` claims that none of the run's own steps made, sorted."""
    if not answer:
        return []
    return sorted(unverified_claims(answer, changes_made(steps)))
