"""The company's people from a file its HR system exports: employees, managers and leave
balances, created or updated (a second import of the same file changes nothing).

The file is CSV, UTF-8, with a header: `employee_id`, `name`, `manager_id` (empty for the top
of the company), one column per leave type holding the remaining days (named as the leave
types are: 特休, 病假, …), and optionally `active` (true/false: false for someone who left) and
`email` (the address a chat front end names the person by when it acts for them: unique,
whatever its case; docs/identity.md).
Every row is checked before anything is written, and every problem is reported at once; one
bad row and nothing is written.

The file is streamed, never held whole: a first pass checks it (keeping only each employee's
id, line and manager), a second writes it in batches, all in one transaction. Standard input
is spooled to a temporary file for the second pass.
"""

from __future__ import annotations

import csv
import math
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TypeVar

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from common.contract import LEAVE_TYPES

from .storage import Balance, Database, Employee

REQUIRED = ("employee_id", "name", "manager_id")
OPTIONAL = ("active", "email")
MAX_ID, MAX_NAME, MAX_EMAIL = 32, 100, 254  # the columns' lengths
EMAIL = re.compile(r"[^@\s]+@[^@\s]+")
# No leave balance comes near a year of days (2,928 hours at 8 h a day): a bigger number is a
# wrong column, unit or export, and ever bigger ones overflow to inf once made hours.
MAX_BALANCE_DAYS = 366
MAX_PROBLEMS = 50  # listed; the count says how many more
BATCH = 500  # employees written per flush: memory stays flat whatever the file's size
TRUE, FALSE = {"true", "1", "yes", "y"}, {"false", "0", "no", "n"}

T = TypeVar("T")


class ImportRefused(Exception):
    """The file cannot be imported; `problems` says why, line by line (the first
    MAX_PROBLEMS of them; `more`: how many others)."""

    def __init__(self, problems: list[str], more: int = 0) -> None:
        self.problems = problems
        shown = problems[:MAX_PROBLEMS]
        more += len(problems) - len(shown)
        super().__init__("\n".join(shown + ([f"… and {more} more"] if more else [])))


class _Problems:
    """Every problem found, the first MAX_PROBLEMS kept as words."""

    def __init__(self) -> None:
        self.shown: list[str] = []
        self.count = 0
        self.unread = False  # the file could not be read to its end

    def add(self, problem: str) -> None:
        self.count += 1
        if len(self.shown) < MAX_PROBLEMS:
            self.shown.append(problem)

    def refuse(self) -> None:
        if self.count:
            raise ImportRefused(self.shown, self.count - len(self.shown))


@dataclass(frozen=True)
class Person:
    line: int
    employee_id: str
    name: str
    manager_id: str | None
    balances: dict[str, float]  # only the types whose cell is filled in
    active: bool | None  # None: the file does not say
    email: str | None = None  # in lower case; None: the file does not say


@dataclass
class Changes:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    # a line per change, for the report: spooled to disk, not held (100,000 of them, maybe)
    lines: IO[str] = field(
        default_factory=lambda: tempfile.SpooledTemporaryFile(  # noqa: SIM115 (closed by report)
            max_size=1 << 20, mode="w+", encoding="utf-8"
        )
    )

    @property
    def any(self) -> bool:
        return bool(self.created or self.updated)


def run(db: Database, path: Path, *, dry_run: bool = False) -> Changes:
    """Check the file (`-`: standard input), then create or update every person (name,
    manager, balances, active) in one transaction, rolled back on a dry run. ImportRefused,
    before anything is written, listing every problem with its line number."""
    with _opened(path) as source:
        try:
            with db.write() as s:
                known = dict(s.execute(select(Employee.id, Employee.manager_id)).tuples().all())
                header = _check(source, str(path), known, _EmailCheck(s))
                changes = _apply(s, _people(source, str(path), header))
                if dry_run:
                    raise _RolledBack(changes)  # leaving the transaction by an error undoes it
        except _RolledBack as rolled_back:
            return rolled_back.changes
    return changes


class _RolledBack(Exception):
    def __init__(self, changes: Changes) -> None:
        self.changes = changes


@contextmanager
def _opened(path: Path) -> Iterator[IO[bytes]]:
    """The file, opened to be read twice; standard input spooled to a temporary file."""
    # only the opening and the spooling are the file's fault, not what is done with it after
    if str(path) == "-":
        with tempfile.TemporaryFile() as spooled:
            try:
                shutil.copyfileobj(sys.stdin.buffer, spooled)
            except OSError as error:
                raise ImportRefused([f"{path}: cannot read it: {error.strerror}"]) from None
            yield spooled
        return
    try:
        file = path.open("rb")
    except OSError as error:
        raise ImportRefused([f"{path}: cannot read it: {error.strerror}"]) from None
    with file:
        yield file


class _NotUtf8(Exception):
    def __init__(self, offset: int) -> None:
        self.offset = offset


def _decoded(source: IO[bytes]) -> Iterator[str]:
    """The file's lines as text. A line at a time: UTF-8 never has a newline byte inside a
    character, so no character is cut in two."""
    offset = 0
    for raw in source:
        try:
            text = raw.decode("utf-8-sig" if offset == 0 else "utf-8")
        except UnicodeDecodeError as error:
            raise _NotUtf8(offset + error.start) from None
        offset += len(raw)
        yield text


def _records(source: IO[bytes], name: str, problems: _Problems) -> Iterator[tuple[int, list[str]]]:
    """(line, cells) of each record, the header's line 1. A file that is not UTF-8, or a
    record CSV cannot read, ends the reading with a problem saying where."""
    source.seek(0)
    rows = csv.reader(_decoded(source))
    line = 1
    while True:
        try:
            cells = next(rows)
        except StopIteration:
            return
        except _NotUtf8 as error:
            problems.add(f"{name}: not UTF-8 (byte {error.offset}): export it as UTF-8")
            problems.unread = True
            return
        except csv.Error as error:
            if "field larger than field limit" in str(error):
                problems.add(
                    f"{name}: line {line}: a cell longer than {csv.field_size_limit():,} "
                    "characters (a quote left open, or not the HR export?); nothing after it "
                    "was read"
                )
            else:
                problems.add(f"{name}: line {line}: not CSV ({error}); nothing after it was read")
            problems.unread = True
            return
        yield line, cells
        line += 1


class _EmailCheck:
    """Whether each email stays one person's after the import: given twice in the file, or
    to someone while the database keeps it another's (read only when the file has emails)."""

    def __init__(self, s: Session) -> None:
        self._session = s
        self._held: dict[str, str] | None = None  # email → employee, in the database now
        self._given: dict[str, tuple[int, str]] = {}  # email → (line, employee), in the file
        self._keeping: set[str] = set()  # employees whose row leaves their email as it is

    def add(self, person: Person) -> str | None:
        if person.email is None:
            self._keeping.add(person.employee_id)
            return None
        first = self._given.setdefault(person.email, (person.line, person.employee_id))
        if first[1] != person.employee_id:
            return f"line {person.line}: email {person.email} is on line {first[0]} too"
        return None

    def problems(self, people: dict[str, tuple[int, str | None]]) -> list[str]:
        """The emails the file gives that someone it does not change keeps."""
        if not self._given:
            return []
        holders = select(Employee.email, Employee.id).where(Employee.email.is_not(None))
        held = {email: holder for email, holder in self._session.execute(holders)}
        found = []
        for email, (line, employee_id) in self._given.items():
            holder = held.get(email)
            keeps = holder is not None and (holder not in people or holder in self._keeping)
            if keeps and holder != employee_id:
                found.append(f"line {line}: email {email} is {holder}'s in the leave database")
        return found


def _check(
    source: IO[bytes], name: str, known: dict[str, str | None], emails: _EmailCheck
) -> list[str]:
    """The header, after a pass over the whole file finding every problem: each row on its
    own, duplicates, and unknown managers and manager cycles in the company as it would be
    after the import (`known`: employee → manager as the database has it now), and emails
    that would be two people's."""
    problems = _Problems()
    records = _records(source, name, problems)
    header = [cell.strip() for cell in next(records, (1, []))[1]]
    if problems.unread and not header:
        problems.refuse()  # the header itself could not be read
    for problem in _header_problems(header):
        problems.add(problem)
    if problems.count and not all(column in header for column in REQUIRED):
        problems.refuse()  # rows cannot be read without these columns
    seen: dict[str, tuple[int, str | None]] = {}  # employee → (line, manager)
    for line, cells in records:
        if not any(cell.strip() for cell in cells):
            continue  # a blank line
        person, said = _person(line, header, cells)
        for problem in said:
            problems.add(problem)
        if person is None:
            continue
        if person.employee_id in seen:
            problems.add(
                f"line {line}: employee_id {person.employee_id} is on line "
                f"{seen[person.employee_id][0]} too"
            )
            continue
        seen[person.employee_id] = (line, person.manager_id)
        said_email = emails.add(person)
        if said_email is not None:
            problems.add(said_email)
    if not seen and not problems.count:
        problems.add("line 2: the file has no employees")
    if not problems.unread:  # else a manager (or an email's holder) may be on a line not read
        for problem in _manager_problems(seen, known) + emails.problems(seen):
            problems.add(problem)
    problems.refuse()
    return header


def _people(source: IO[bytes], name: str, header: list[str]) -> Iterator[Person]:
    """The file's people, read again once it is known to be sound."""
    problems = _Problems()
    records = _records(source, name, problems)
    next(records)
    for line, cells in records:
        if any(cell.strip() for cell in cells):
            person, _ = _person(line, header, cells)
            assert person is not None and person.line == line  # _check found no problem
            yield person
    assert not problems.count, problems.shown


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
    """The row as a person, and its problems. A row with problems still names its employee
    and manager when it can (the person then has no balances), so that the managers can be
    checked too: every problem is reported at once, not one round after another."""
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
        said = row[leave_type]
        try:
            days = float(said)
        except ValueError:
            problems.append(f"line {line}: {leave_type} balance {said!r} is no number")
            continue
        if math.isnan(days) or said.lower().lstrip("+-") in ("inf", "infinity"):
            problems.append(f"line {line}: {leave_type} balance {said!r} is no number of days")
        elif days < 0:
            problems.append(f"line {line}: {leave_type} balance {said} is negative")
        elif days > MAX_BALANCE_DAYS:  # 1e309 too: float() makes it inf
            problems.append(
                f"line {line}: {leave_type} balance {said} is more than {MAX_BALANCE_DAYS} "
                "days, more than any leave balance holds (days, not hours?)"
            )
        else:
            balances[leave_type] = days
    active: bool | None = None
    if row.get("active"):
        flag = row["active"].lower()
        if flag not in TRUE | FALSE:
            problems.append(f"line {line}: active {row['active']!r} is neither true nor false")
        active = flag in TRUE
    email = row.get("email", "").lower() or None
    if email is not None and (len(email) > MAX_EMAIL or not EMAIL.fullmatch(email)):
        problems.append(f"line {line}: email {email[:80]!r} is no email address")
        email = None
    if not employee_id or len(employee_id) > MAX_ID:
        return None, problems
    manager = row["manager_id"] or None
    return Person(line, employee_id, name, manager, balances, active, email), problems


def _manager_problems(
    people: dict[str, tuple[int, str | None]], known: dict[str, str | None]
) -> list[str]:
    """Unknown managers and manager cycles (each cycle on each of its members' lines), in line
    order. Each employee is walked once: a long chain of managers costs no more than a flat
    company."""
    managers = {**known, **{e: manager for e, (_, manager) in people.items()}}
    found: list[tuple[int, str]] = []
    for employee_id, (line, manager) in people.items():
        if manager is not None and manager not in managers:
            found.append(
                (line, f"line {line}: manager_id {manager} of {employee_id} is no employee "
                 "(neither in the file nor in the leave database)")
            )  # fmt: skip
    walked: dict[str, bool] = {}  # employee → False while on the current walk, True after
    for start in people:
        path: list[str] = []
        current: str | None = start
        while current is not None and current in managers and current not in walked:
            walked[current] = False
            path.append(current)
            current = managers[current]
        if current is not None and walked.get(current) is False:
            cycle = path[path.index(current) :]
            for at, member in enumerate(cycle):
                if member in people:
                    loop = [*cycle[at:], *cycle[:at], member]
                    line = people[member][0]
                    found.append((line, f"line {line}: managers form a cycle: {' → '.join(loop)}"))
        for employee_id in path:
            walked[employee_id] = True
    return [problem for _, problem in sorted(found)]


def _batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


@dataclass
class _Later:
    """What is set once every employee is written: managers (a manager may be a row further
    down) and emails (two people may swap theirs: each is unique at every statement)."""

    managers: list[tuple[str, str | None]] = field(default_factory=list)
    emails: list[tuple[str, str]] = field(default_factory=list)


def _apply(s: Session, people: Iterator[Person]) -> Changes:
    changes = Changes()
    later = _Later()
    for batch in _batches(people, BATCH):
        ids = [p.employee_id for p in batch]
        existing = {e.id: e for e in s.scalars(select(Employee).where(Employee.id.in_(ids)))}
        balances = {
            (b.employee_id, b.leave_type): b
            for b in s.scalars(select(Balance).where(Balance.employee_id.in_(ids)))
        }
        new = {p.employee_id for p in batch if p.employee_id not in existing}
        for person in (p for p in batch if p.employee_id in new):
            employee = Employee(id=person.employee_id, name=person.name, source="import")
            s.add(employee)
            existing[person.employee_id] = employee
        s.flush()  # the new employees before their balances, which refer to them
        for person in batch:
            employee = existing[person.employee_id]
            if person.employee_id in new:
                _update(s, employee, person, balances, later)
                changes.created += 1
                changes.lines.write(f"+ {person.employee_id} {person.name}: {_described(person)}\n")
                continue
            said = _update(s, employee, person, balances, later)
            if said:
                changes.updated += 1
                changes.lines.write(f"~ {person.employee_id}: {'; '.join(said)}\n")
            else:
                changes.unchanged += 1
        s.flush()
        s.expunge_all()  # written: the session need not hold them any more
    for chunk in _batches(later.managers, BATCH):
        s.execute(update(Employee), [{"id": e, "manager_id": m} for e, m in chunk])
    for given in (False, True):  # every changed email let go first, then given
        for emails in _batches(later.emails, BATCH):
            rows: list[dict[str, str | None]] = [
                {"id": e, "email": email if given else None} for e, email in emails
            ]
            s.execute(update(Employee), rows)
    return changes


def _update(
    s: Session,
    employee: Employee,
    person: Person,
    balances: dict[tuple[str, str], Balance],
    later: _Later,
) -> list[str]:
    """Bring one employee in line with the file; what changed, as words. A new manager or
    email is added to `later`, to be set once every employee is written."""
    said = []
    if employee.name != person.name:
        said.append(f"name {employee.name} → {person.name}")
        employee.name = person.name
    if employee.manager_id != person.manager_id:
        said.append(f"manager {employee.manager_id or '—'} → {person.manager_id or '—'}")
        later.managers.append((person.employee_id, person.manager_id))
    if person.email is not None and employee.email != person.email:
        said.append(f"email {employee.email or '—'} → {person.email}")
        later.emails.append((person.employee_id, person.email))
    if person.active is not None and employee.is_active != person.active:
        said.append("reactivated" if person.active else "deactivated (left the company)")
        employee.active = person.active
    if employee.source != "import":
        # the company's own now, even under a demo id: remove-demo-data keeps it
        said.append("now the company's own (was demo data)")
        employee.source = "import"
    for leave_type in LEAVE_TYPES:
        days = person.balances.get(leave_type)
        balance = balances.get((person.employee_id, leave_type))
        if balance is None:
            balance = Balance(
                employee_id=person.employee_id, leave_type=leave_type, remaining_days=0.0
            )
            s.add(balance)
            balances[(person.employee_id, leave_type)] = balance
            if days is None:
                continue
        if days is not None and balance.remaining_days != days:
            said.append(f"{leave_type} {balance.remaining_days:g} → {days:g}")
            balance.remaining_days = days
    return said


def _described(person: Person) -> str:
    manager = f"manager {person.manager_id}" if person.manager_id else "no manager"
    days = ", ".join(f"{t} {d:g}" for t, d in person.balances.items())
    email = f"; {person.email}" if person.email else ""
    inactive = "; inactive" if person.active is False else ""
    return f"{manager}; {days or 'no balances'}{email}{inactive}"


def report(changes: Changes, *, dry_run: bool) -> Iterator[str]:
    """A line per change, in the file's order, then the counts."""
    with changes.lines:
        changes.lines.seek(0)
        for line in changes.lines:
            yield line.rstrip("\n")
    verb = "would be" if dry_run else ""
    yield (
        f"import{' (dry run)' if dry_run else ''}: {changes.created} employee(s) "
        f"{verb + ' ' if verb else ''}created, {changes.updated} {verb + ' ' if verb else ''}"
        f"updated, {changes.unchanged} unchanged"
        + ("" if changes.any or dry_run else " — nothing to do")
    )
