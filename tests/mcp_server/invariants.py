"""What must hold in the leave database however requests interleave: every balance is the
seeded entitlement less the days of the approved leaves, and every leave's audit trail leads,
step by applied step, to the status it has."""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import select

from common.contract import LeaveStatus
from mcp_server.seed import START_BALANCE
from mcp_server.storage import AuditEntry, Balance, Database, Leave


@dataclass(frozen=True)
class Books:
    leaves: int
    approved_days: float
    audit_entries: int


def assert_books_balance(database: Database) -> Books:
    """Fails naming the first balance or trail that disagrees with the leaves' statuses."""
    with database.read() as s:
        leaves = s.scalars(select(Leave)).all()
        balances = s.scalars(select(Balance)).all()
        entries = s.scalars(select(AuditEntry).order_by(AuditEntry.id)).all()

    approved: dict[tuple[str, str], float] = defaultdict(float)
    for leave in leaves:
        if leave.status == LeaveStatus.APPROVED:
            approved[leave.employee_id, leave.leave_type] += leave.days
    for balance in balances:
        key = (balance.employee_id, balance.leave_type)
        expected = START_BALANCE[balance.leave_type] - approved[key]
        assert balance.remaining_days == expected, (
            f"balance {key}: {balance.remaining_days}, but the approved leaves imply {expected}"
        )

    trails: dict[str, list[AuditEntry]] = defaultdict(list)
    for entry in entries:
        trails[entry.leave_id].append(entry)
    status_of = {leave.id: leave.status for leave in leaves}
    for leave_id, trail in trails.items():
        applied = [e for e in trail if e.outcome == "applied"]
        for entry in trail:
            if entry.outcome == "not_applied":
                assert entry.from_status == entry.to_status, (leave_id, entry.tool)
        for before, after in itertools.pairwise(applied):
            assert after.from_status == before.to_status, (
                f"{leave_id}: {after.tool} moved {after.from_status} → {after.to_status}, "
                f"but the previous applied change left it {before.to_status}"
            )
        if applied:
            assert applied[-1].to_status == status_of.get(leave_id), (
                f"{leave_id}: the trail ends at {applied[-1].to_status}, "
                f"the leave is {status_of.get(leave_id)}"
            )
    return Books(len(leaves), sum(approved.values()), len(entries))
