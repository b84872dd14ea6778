"""Employees of a load test's own: a manager and an employee made for one run, with tokens, and
removed after it with every leave, audit entry, open confirmation, balance and token they have.

Load tests used to act as a real person (their token and their manager's), and left thousands
of 「壓測…」 leaves in that person's history and audit log. These employees are nobody: their
rows are marked (`source = "loadtest"`) and their ids start with `loadtest-` and the run's
marker, so `remove-load-test-employees` finds every one a run left behind (a run cut short,
a machine that died) and never touches anyone else.
"""

from __future__ import annotations

import datetime as dt
import secrets
from dataclasses import dataclass

from sqlalchemy import select

from .identity import Identities
from .seed import START_BALANCE, delete_employees
from .storage import Balance, Database, Employee

SOURCE = "loadtest"
PREFIX = "loadtest-"
# A safety net only: the load test removes its tokens when it ends; a run that cannot (killed)
# leaves tokens that stop working by themselves.
DEFAULT_EXPIRY = dt.timedelta(hours=12)


@dataclass(frozen=True)
class LoadTestPeople:
    marker: str  # the run's: `loadtest-3f9a1c2b`, the start of both employees' ids
    employee_id: str
    employee_token: str
    manager_id: str
    manager_token: str

    def as_json(self) -> dict[str, object]:
        return {
            "marker": self.marker,
            "employee": {"id": self.employee_id, "token": self.employee_token},
            "manager": {"id": self.manager_id, "token": self.manager_token},
        }


@dataclass(frozen=True)
class Removed:
    employees: list[str]
    leaves: int
    tokens: int


def add(db: Database, expires_in: dt.timedelta = DEFAULT_EXPIRY) -> LoadTestPeople:
    """A manager and an employee reporting to them, each with the demo's starting balances and
    a token that expires in `expires_in`."""
    marker = f"{PREFIX}{secrets.token_hex(4)}"
    manager_id, employee_id = f"{marker}-m", f"{marker}-e"
    with db.write() as s:
        for person, name, manager in (
            (manager_id, f"壓測主管 {marker}", None),
            (employee_id, f"壓測員工 {marker}", manager_id),
        ):
            s.add(Employee(id=person, name=name, manager_id=manager, source=SOURCE))
            s.flush()  # the manager's row before the employee names it
            for leave_type, days in START_BALANCE.items():
                s.add(Balance(employee_id=person, leave_type=leave_type, remaining_days=days))
    identities = Identities(db)
    label = f"load test {marker}"
    employee_token, _ = identities.issue(employee_id, expires_in=expires_in, label=label)
    manager_token, _ = identities.issue(manager_id, expires_in=expires_in, label=label)
    return LoadTestPeople(marker, employee_id, employee_token, manager_id, manager_token)


def remove(db: Database, marker: str | None = None) -> Removed:
    """Delete the load-test employees of the run `marker` (None: of every run), with their
    leaves and those leaves' audit entries and open confirmations, balances and tokens."""
    if marker is not None and not marker.startswith(PREFIX):
        raise ValueError(f"{marker!r} is no load-test marker (they start with {PREFIX!r})")
    with db.write() as s:
        found = select(Employee.id).where(Employee.source == SOURCE)
        if marker is not None:
            found = found.where(Employee.id.startswith(f"{marker}-", autoescape=True))
        ids = sorted(s.scalars(found).all())
        leaves, tokens = delete_employees(s, ids)
    return Removed(ids, leaves, tokens)
