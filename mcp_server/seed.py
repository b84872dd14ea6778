"""Demo data, for development only: one manager, two employees, leaves with zh-TW reasons, and
demo tokens (which a production server refuses, and refuses to start beside); and its removal."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from common.contract import LeaveStatus
from common.credentials import hash_token
from common.demo import DEMO_EMPLOYEES

from .leaves import new_leave_id, working_days
from .storage import (
    ApiToken,
    AuditEntry,
    Balance,
    Database,
    Employee,
    Leave,
    PendingConfirmation,
    new_token_id,
)

DEMO_TOKENS = {e.token: e.employee_id for e in DEMO_EMPLOYEES}
# managers first: an employee row names its manager's
EMPLOYEES = [
    (e.employee_id, e.name, e.manager_id)
    for e in sorted(DEMO_EMPLOYEES, key=lambda e: e.manager_id is not None)
]
START_BALANCE = {"特休": 14.0, "病假": 30.0, "事假": 14.0, "補休": 2.0}
# What a front end acting for the demo employees names them by (docs/identity.md).
DEMO_EMAILS = {
    "M001": "meiling.chen@example.com",
    "E001": "xiaoming.wang@example.com",
    "E002": "xiaohua.li@example.com",
}

# (owner, type, weeks from the coming Monday, weekday offset, length in days, status, reason)
LEAVES = [
    ("E001", "特休", 3, 0, 3, LeaveStatus.DRAFT, "家庭旅遊，去花蓮三天"),
    ("E001", "特休", 5, 3, 2, LeaveStatus.APPROVED, "回台南參加表妹婚禮"),
    ("E001", "病假", 1, 2, 1, LeaveStatus.SUBMITTED, "牙齒矯正回診"),
    ("E001", "事假", -2, 1, 1, LeaveStatus.REJECTED, "處理房屋過戶"),
    ("E002", "事假", 2, 0, 1, LeaveStatus.SUBMITTED, "搬家"),
    ("E002", "特休", 4, 4, 1, LeaveStatus.APPROVED, "參加弟弟的畢業典禮"),
    ("E002", "補休", 6, 1, 1, LeaveStatus.DRAFT, "加班補休"),
    ("M001", "特休", 7, 0, 2, LeaveStatus.APPROVED, "年度健康檢查與休養"),
]


def seed(db: Database, *, reset: bool = False, today: dt.date | None = None) -> bool:
    """Create the demo data. Returns False (and changes nothing) when data already exists."""
    if reset:
        db.drop_schema()
    db.create_schema()
    today = today or dt.date.today()
    monday = today + dt.timedelta(days=7 - today.weekday())
    with db.write() as s:
        if s.scalars(select(Employee).limit(1)).first() is not None:
            return False
        for employee_id, name, manager_id in EMPLOYEES:
            s.add(
                Employee(
                    id=employee_id,
                    name=name,
                    manager_id=manager_id,
                    source="demo",
                    email=DEMO_EMAILS.get(employee_id),
                )
            )
        s.flush()
        balances = {e: dict(START_BALANCE) for e, _, _ in EMPLOYEES}
        for owner, leave_type, weeks, offset, length, status, reason in LEAVES:
            start = monday + dt.timedelta(weeks=weeks, days=offset)
            end = start + dt.timedelta(days=length - 1)
            days = float(working_days(start, end))
            s.add(
                Leave(
                    id=new_leave_id(),
                    employee_id=owner,
                    leave_type=leave_type,
                    start_date=start,
                    end_date=end,
                    days=days,
                    status=status,
                    reason=reason,
                )
            )
            if status == LeaveStatus.APPROVED:
                balances[owner][leave_type] -= days
        for employee_id, by_type in balances.items():
            for leave_type, remaining in by_type.items():
                s.add(
                    Balance(
                        employee_id=employee_id, leave_type=leave_type, remaining_days=remaining
                    )
                )
        for token, employee_id in DEMO_TOKENS.items():
            s.add(
                ApiToken(
                    token_sha256=hash_token(token),
                    employee_id=employee_id,
                    is_demo=True,
                    public_id=new_token_id(),
                    label="demo",
                )
            )
    return True


def demo_employees(s: Session) -> list[Employee]:
    """The seed step's employees: marked so, or (written before rows were marked) with the
    seed's very ids and names. An imported employee is never one of them."""
    seeded = {(employee_id, name) for employee_id, name, _ in EMPLOYEES}
    return [
        e
        for e in s.scalars(select(Employee)).all()
        if e.source == "demo" or (e.source is None and (e.id, e.name) in seeded)
    ]


@dataclass
class DemoRemoved:
    tokens: int
    employees: list[str]
    # demo employee → the other employees who report to them: kept (their reports would lose
    # their manager), for the operator to settle
    kept: dict[str, list[str]]


def remove_demo_data(db: Database) -> DemoRemoved:
    """Delete the demo tokens, and the demo employees with their leaves, balances, audit
    entries and open confirmations. A demo employee someone else reports to stays, and is
    named with those reports."""
    with db.write() as s:
        tokens = s.execute(delete(ApiToken).where(ApiToken.is_demo.is_(True)))
        demo = {e.id for e in demo_employees(s)}
        kept: dict[str, list[str]] = {}
        for employee_id, manager_id in s.execute(
            select(Employee.id, Employee.manager_id)
            .where(Employee.manager_id.in_(demo), Employee.id.not_in(demo))
            .order_by(Employee.id)
        ).tuples():
            assert manager_id is not None
            kept.setdefault(manager_id, []).append(employee_id)
        removed = sorted(demo - set(kept))
        delete_employees(s, removed)
        return DemoRemoved(_count(tokens), removed, kept)


def delete_employees(s: Session, ids: list[str]) -> tuple[int, int]:
    """Delete these employees and everything of theirs — leaves, those leaves' audit entries
    and open confirmations, balances, tokens: (leaves, tokens) deleted."""
    leaves = select(Leave.id).where(Leave.employee_id.in_(ids))
    s.execute(delete(AuditEntry).where(AuditEntry.leave_id.in_(leaves)))
    s.execute(delete(PendingConfirmation).where(PendingConfirmation.leave_id.in_(leaves)))
    gone = s.execute(delete(Leave).where(Leave.employee_id.in_(ids)))
    s.execute(delete(Balance).where(Balance.employee_id.in_(ids)))
    tokens = s.execute(delete(ApiToken).where(ApiToken.employee_id.in_(ids)))
    # managers last: one may report to another of them
    s.execute(update(Employee).where(Employee.id.in_(ids)).values(manager_id=None))
    s.execute(delete(Employee).where(Employee.id.in_(ids)))
    return _count(gone), _count(tokens)


def _count(result: object) -> int:
    return int(getattr(result, "rowcount", 0) or 0)
