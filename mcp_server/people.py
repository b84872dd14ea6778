"""The company's people from a file its HR system exports: employees, managers and leave
balances, created or updated (a second import of the same file changes nothing).

The file is CSV, UTF-8, with a header: `employee_id`, `name`, `manager_id` (empty for the top
of the company), one column per leave type holding the remaining days (named as the leave
types are: 特休, 病假, …), and optionally `active` (true/false: false for someone who left).
Every row is checked before anything is written; one bad row and nothing is.
"""

from __future__ import annotations

import csv
import io
import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from common.contract import LEAVE_TYPES

from .storage import Balance, Database, Employee

REQUIRED = ("employee_id", "name", "manager_id")
OPTIONAL = ("active",)
MAX_ID, MAX_NAME = 32, 100  # the columns' lengths
MAX_PROBLEMS = 50  # listed; the count says how many more
TRUE, FALSE = {"true", "1", "yes", "y"}, {"false", "0", "no", "n"}


class ImportRefused(Exception):
    """The file cannot be imported; `problems` says why, line by line."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        shown = problems[:MAX_PROBLEMS]
        more = len(problems) - len(shown)
        super().__init__("\n".join(shown + ([f"… and {more} more"] if more else [])))


@dataclass(frozen=True)
class Person:
    line: int
    employee_id: str
    name: str
    manager_id: str | None
    balances: dict[str, float]  # only the types whose cell is filled in
    active: bool | None  # None: the file does not say


@dataclass
class Changes:
    created: list[str] = field(default_factory=list)  # a line per change, for the report
    updated: list[str] = field(default_factory=list)
    unchanged: int = 0

    @property
    def any(self) -> bool:
        return bool(self.created or self.updated)


def read(path: Path) -> list[Person]:
    """Every row of the file (`-`: standard input), checked on its own and against the
    others; ImportRefused listing every problem with its line number."""
    try:
        data = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
        text = data.decode("utf-8-sig")
    except OSError as error:
        raise ImportRefused([f"{path}: cannot read it: {error.strerror}"]) from None
    except UnicodeDecodeError as error:
        raise ImportRefused(
            [f"{path}: not UTF-8 (byte {error.start}): export it as UTF-8"]
        ) from None
    rows = csv.reader(io.StringIO(text, newline=""))
    header = [cell.strip() for cell in next(rows, [])]
    problems = _header_problems(header)
    if problems:
        raise ImportRefused(problems)
    people: list[Person] = []
    for line, cells in enumerate(rows, start=2):
        if not any(cell.strip() for cell in cells):
            continue  # a blank line
        person, said = _person(line, header, cells)
        problems += said
        if person is not None:
            people.append(person)
    if not people and not problems:
        problems.append("line 2: the file has no employees")
    problems += _duplicates(people)
    if problems:
        raise ImportRefused(problems)
    return people


def _header_problems(header: list[str]) -> list[str]:
    if not header or header == [""]:
        return ["line 1: no header (employee_id, name, manager_id, then the leave types)"]
    missing = [name for name in REQUIRED if name not in header]
    unknown = [name for name in header if name not in (*REQUIRED, *OPTIONAL, *LEAVE_TYPES)]
    problems = [f"line 1: no {name} column" for name in missing]
    problems += [
        f"line 1: column {name!r} is no leave type (known: {'、'.join(LEAVE_TYPES)})"
        for name in unknown
    ]
    repeated = sorted({name for name in header if header.count(name) > 1})
    problems += [f"line 1: column {name!r} appears twice" for name in repeated]
    return problems


def _person(line: int, header: list[str], cells: list[str]) -> tuple[Person | None, list[str]]:
    if len(cells) != len(header):
        return None, [f"line {line}: {len(cells)} cells, the header has {len(header)}"]
    row = {name: cell.strip() for name, cell in zip(header, cells, strict=True)}
    problems = []
    employee_id, name = row["employee_id"], row["name"]
    if not employee_id:
        problems.append(f"line {line}: no employee_id")
    elif len(employee_id) > MAX_ID:
        problems.append(f"line {line}: employee_id longer than {MAX_ID} characters")
    if not name:
        problems.append(f"line {line}: {employee_id or 'the employee'} has no name")
    elif len(name) > MAX_NAME:
        problems.append(f"line {line}: name longer than {MAX_NAME} characters")
    balances: dict[str, float] = {}
    for leave_type in (t for t in LEAVE_TYPES if row.get(t)):
        try:
            days = float(row[leave_type])
        except ValueError:
            problems.append(f"line {line}: {leave_type} balance {row[leave_type]!r} is no number")
            continue
        if not math.isfinite(days) or days < 0:
            problems.append(f"line {line}: {leave_type} balance {row[leave_type]} is negative")
            continue
        balances[leave_type] = days
    active: bool | None = None
    if row.get("active"):
        flag = row["active"].lower()
        if flag not in TRUE | FALSE:
            problems.append(f"line {line}: active {row['active']!r} is neither true nor false")
        active = flag in TRUE
    if problems:
        return None, problems
    manager = row["manager_id"] or None
    return Person(line, employee_id, name, manager, balances, active), []


def _duplicates(people: list[Person]) -> list[str]:
    first: dict[str, int] = {}
    problems = []
    for person in people:
        if person.employee_id in first:
            problems.append(
                f"line {person.line}: employee_id {person.employee_id} is on line "
                f"{first[person.employee_id]} too"
            )
        else:
            first[person.employee_id] = person.line
    return problems


def _manager_problems(people: list[Person], known: dict[str, str | None]) -> list[str]:
    """Unknown managers and manager cycles, in the company as it would be after the import
    (`known`: employee → manager as the database has it now)."""
    managers = {**known, **{p.employee_id: p.manager_id for p in people}}
    problems = []
    for person in people:
        if person.manager_id is not None and person.manager_id not in managers:
            problems.append(
                f"line {person.line}: manager_id {person.manager_id} of {person.employee_id} "
                "is no employee (neither in the file nor in the leave database)"
            )
    for person in people:
        chain, current = [person.employee_id], person.manager_id
        while current is not None and current in managers and current not in chain:
            chain.append(current)
            current = managers[current]
        if current is not None and current in chain:
            loop = [*chain[chain.index(current) :], current]
            if loop[0] == person.employee_id:  # report each cycle on its members' lines
                problems.append(f"line {person.line}: managers form a cycle: {' → '.join(loop)}")
    return problems


def apply(db: Database, people: list[Person], *, dry_run: bool = False) -> Changes:
    """Create or update every person (name, manager, balances, active); in one transaction,
    rolled back on a dry run. ImportRefused before anything is written when a manager is
    unknown or the managers would form a cycle."""
    try:
        with db.write() as s:
            changes = _apply(s, people)
            if dry_run:
                raise _RolledBack(changes)  # leaving the transaction by an error undoes it
    except _RolledBack as rolled_back:
        return rolled_back.changes
    return changes


class _RolledBack(Exception):
    def __init__(self, changes: Changes) -> None:
        self.changes = changes


def _apply(s: Session, people: list[Person]) -> Changes:
    existing = {e.id: e for e in s.scalars(select(Employee)).all()}
    problems = _manager_problems(people, {i: e.manager_id for i, e in existing.items()})
    if problems:
        raise ImportRefused(problems)
    balances = {(b.employee_id, b.leave_type): b for b in s.scalars(select(Balance)).all()}
    changes = Changes()
    added = {p.employee_id for p in people if p.employee_id not in existing}
    for person in (
        p for p in people if p.employee_id in added
    ):  # first without managers: a manager may be a row further down
        employee = Employee(id=person.employee_id, name=person.name, source="import")
        s.add(employee)
        existing[person.employee_id] = employee
    s.flush()
    for person in people:
        said = _update(s, existing[person.employee_id], person, balances)
        if person.employee_id in added:
            changes.created.append(f"+ {person.employee_id} {person.name}: {_described(person)}")
        elif said:
            changes.updated.append(f"~ {person.employee_id}: {'; '.join(said)}")
        else:
            changes.unchanged += 1
    return changes


def _update(
    s: Session, employee: Employee, person: Person, balances: dict[tuple[str, str], Balance]
) -> list[str]:
    """Bring one employee in line with the file; what changed, as words."""
    said = []
    if employee.name != person.name:
        said.append(f"name {employee.name} → {person.name}")
        employee.name = person.name
    if employee.manager_id != person.manager_id:
        said.append(f"manager {employee.manager_id or '—'} → {person.manager_id or '—'}")
        employee.manager_id = person.manager_id
    if person.active is not None and employee.is_active != person.active:
        said.append("reactivated" if person.active else "deactivated (left the company)")
        employee.active = person.active
    employee.source = "import"  # the company's own now, even under a demo id
    for leave_type in LEAVE_TYPES:
        days = person.balances.get(leave_type)
        balance = balances.get((employee.id, leave_type))
        if balance is None:
            balance = Balance(employee_id=employee.id, leave_type=leave_type, remaining_days=0.0)
            s.add(balance)
            balances[(employee.id, leave_type)] = balance
            if days is None:
                continue
        if days is not None and balance.remaining_days != days:
            said.append(f"{leave_type} {balance.remaining_days:g} → {days:g}")
            balance.remaining_days = days
    return said


def _described(person: Person) -> str:
    manager = f"manager {person.manager_id}" if person.manager_id else "no manager"
    days = ", ".join(f"{t} {d:g}" for t, d in person.balances.items())
    return f"{manager}; {days or 'no balances'}" + ("; inactive" if person.active is False else "")


def report(changes: Changes, *, dry_run: bool) -> Iterable[str]:
    verb = "would be" if dry_run else ""
    yield from changes.created
    yield from changes.updated
    yield (
        f"import{' (dry run)' if dry_run else ''}: {len(changes.created)} employee(s) "
        f"{verb + ' ' if verb else ''}created, {len(changes.updated)} {verb + ' ' if verb else ''}"
        f"updated, {changes.unchanged} unchanged"
        + ("" if changes.any or dry_run else " — nothing to do")
    )
