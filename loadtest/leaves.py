"""Each virtual user's own leaves, made through the MCP server's tools and rules (never the
database), in the state its next scenario needs, whatever ran before: a draft to submit, an
approved leave to cancel or to keep after a declined cancel.

The employee (the load test's token) creates and submits; their manager approves, and rejects
what a scenario submitted, so that its dates are free again. A reason carries a tag of its own
(壓測 and eight digits), by which the scenario's request names the leave and the scripted
model's search finds it and nothing else. Leaves go on free working days far in the future.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass
from typing import Any

from common.contract import LEAVE_TYPES, LeaveStatus, ToolName

from .mcp import McpClient, ToolRefused

FIRST_DAY = dt.date(2040, 1, 2)  # a Monday
WEEKS = 50 * 52  # working days from 2040 to 2089: a few thousand leaves rarely meet
ATTEMPTS = 8  # taken days tried before giving up on an employee whose calendar is full
TAG = "壓測"


class SetupError(Exception):
    """A user's data could not be put in the state its scenario needs; says why."""


@dataclass
class Leave:
    leave_id: str
    reason: str


def _accept(_question: str, _schema: dict[str, Any]) -> dict[str, Any]:
    return {"action": "accept", "content": {"confirm": True}}


class OwnLeaves:
    def __init__(self, employee: McpClient, manager: McpClient, rng: random.Random) -> None:
        self.employee = employee
        self.manager = manager
        self.rng = rng
        self._kept: Leave | None = None

    def close(self) -> None:
        """Give back what the user still holds (its kept approved leave's days)."""
        try:
            if self._kept is not None:
                self.retire(self._kept)
        finally:
            self.employee.close()
            self.manager.close()

    # -- the states a scenario needs ------------------------------------------------------

    def draft(self, leave_type: str = "特休") -> Leave:
        """A new draft of one working day, with a reason nothing else has."""
        reason = f"{TAG}{self.rng.randrange(10**8):08d}"
        for _ in range(ATTEMPTS):
            # a working day drawn as such: a weekend drawn and skipped spent an attempt, and
            # eight weekends in a row ended about one draft in 20,000 with "no free day"
            day = FIRST_DAY + dt.timedelta(
                weeks=self.rng.randrange(WEEKS), days=self.rng.randrange(5)
            )
            arguments = {
                "leave_type": leave_type,
                "start_date": day.isoformat(),
                "end_date": day.isoformat(),
                "reason": reason,
            }
            try:
                made = self.employee.call(ToolName.CREATE_LEAVE, arguments)
            except ToolRefused as refused:
                if refused.code == "overlap":
                    continue  # another of this employee's leaves holds the day
                raise SetupError(f"create_leave: {refused}") from None
            return Leave(made["leave_id"], reason)
        raise SetupError(f"create_leave: no free day found in {ATTEMPTS} tries")

    def approved(self) -> Leave:
        """A new approved leave: drafted and submitted by the employee, approved by the
        manager, of the leave type with the most days left."""
        balance = self.employee.call(ToolName.GET_LEAVE_BALANCE, {})
        left = {b["leave_type"]: b["remaining_days"] for b in balance["balances"]}
        leave_type = max(LEAVE_TYPES, key=lambda t: left.get(t, 0))
        if left.get(leave_type, 0) < 1:
            raise SetupError("no leave type has a day left to approve")
        leave = self.draft(leave_type)
        self._step(self.employee, leave, LeaveStatus.SUBMITTED)
        self._step(self.manager, leave, LeaveStatus.APPROVED)
        return leave

    def kept(self) -> Leave:
        """The user's approved leave for reads and declined cancels: the same one while it
        stays approved, a new one once something changed it."""
        if self._kept is None or self.status(self._kept) != LeaveStatus.APPROVED:
            self._kept = self.approved()
        return self._kept

    def status(self, leave: Leave) -> str | None:
        found = self.employee.call(ToolName.SEARCH_LEAVES, {"keyword": leave.reason})
        return next((v["status"] for v in found["leaves"] if v["leave_id"] == leave.leave_id), None)

    def retire(self, leave: Leave) -> None:
        """Out of the way, by the rules: a draft submitted and rejected, a submitted leave
        rejected, an approved one cancelled (confirmed), so its day and balance are free."""
        status = self.status(leave)
        if status == LeaveStatus.DRAFT:
            self._step(self.employee, leave, LeaveStatus.SUBMITTED)
            status = LeaveStatus.SUBMITTED
        if status == LeaveStatus.SUBMITTED:
            self._step(self.manager, leave, LeaveStatus.REJECTED)
        elif status == LeaveStatus.APPROVED:
            self.employee.call(
                ToolName.CANCEL_APPROVED_LEAVE, {"leave_id": leave.leave_id}, answer=_accept
            )
        if leave is self._kept:
            self._kept = None

    @staticmethod
    def _step(who: McpClient, leave: Leave, status: str) -> None:
        try:
            who.call(ToolName.UPDATE_LEAVE_STATUS, {"leave_id": leave.leave_id, "status": status})
        except ToolRefused as refused:
            raise SetupError(f"update_leave_status {status}: {refused}") from None
