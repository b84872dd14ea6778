"""What a write that timed out changed, asked of the leave system itself.

A timed-out call may still be applied after the loop gave up on it (the MCP server finishes it
once, say, a database lock is released), so "not done" is never the loop's to say. It reads the
leave back: if the change shows, it was applied; if not, its outcome is unknown for now.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.contract import LeaveStatus, ToolName

CHECK_TOOL = ToolName.SEARCH_LEAVES
# The status each write leaves behind when it is applied.
TARGET_STATUS: dict[str, Callable[[dict[str, Any]], Any]] = {
    ToolName.UPDATE_LEAVE_STATUS: lambda arguments: arguments.get("status"),
    ToolName.CANCEL_APPROVED_LEAVE: lambda _arguments: LeaveStatus.CANCELLED,
}


@dataclass(frozen=True)
class Verified:
    applied: bool  # True only when the leave shows the change
    seen: str  # what the check found, in words for the user


def check_call(name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The read that shows whether `name(arguments)` took effect, if there is one."""
    leave_id = arguments.get("leave_id")
    if name in TARGET_STATUS and isinstance(leave_id, str) and leave_id.strip():
        return CHECK_TOOL, {"keyword": leave_id.strip()}
    return None


def judge(name: str, arguments: dict[str, Any], found: dict[str, Any] | None) -> Verified:
    """Whether the check's structured result shows the change."""
    leave_id = str(arguments.get("leave_id", "")).strip()
    leaves = (found or {}).get("leaves") or []
    leave = next((v for v in leaves if v.get("leave_id") == leave_id), None)
    if leave is None:
        return Verified(False, f"查不到假單 {leave_id}")
    target = TARGET_STATUS[name](arguments)
    status = leave.get("status")
    return Verified(status == target, f"假單 {leave_id} 現在是 {status}")
