"""A site's own scenarios, as data: a TOML file of requests, the person making them, the
leaves they need to start with and the end state that is right (docs/evaluation.md shows one;
evals/site.example.toml is one). Checked whole before anything runs: a mistake is one line
naming the scenario and the field, and nothing runs.
"""

from __future__ import annotations

import datetime as dt
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from common.contract import LeaveStatus, ToolName, canonical_leave_type
from common.demo import DEMO_EMPLOYEES
from mcp_server.leaves import working_days
from mcp_server.seed import LEAVES

from .scenarios import (
    EMPLOYEE_OF,
    EndState,
    Expect,
    Goal,
    LeaveRow,
    RightCall,
    Scenario,
    StartLeave,
    StartPerson,
    Turn,
    balance_told,
    change_call,
    on,
)

TOKEN_OF = {e.employee_id: e.token for e in DEMO_EMPLOYEES}
# The demo data's leaves (reason → (owner, status)); their days are the seed's, from today.
SEEDED = {reason: (owner, status) for owner, _, _, _, _, status, reason in LEAVES}
# Statuses the server's overlap check passes over (mcp_server/leaves.py, create)
NOT_BLOCKING = (LeaveStatus.REJECTED, LeaveStatus.CANCELLED)


def _person(value: str, people: dict[str, StartPerson]) -> str:
    """A person as a scenario names them — an employee id of the demo data or of the file's
    people, or one of their tokens — as their employee id."""
    by_token = EMPLOYEE_OF | {p.token: p.employee_id for p in people.values()}
    employee = by_token.get(value, value)
    if employee not in TOKEN_OF and employee not in people:
        known = ", ".join([*sorted(TOKEN_OF), *people])
        raise ValueError(f"unknown person {value!r} (known: {known} or their tokens)")
    return employee


def _day(value: str) -> str:
    on(value, dt.date.today())  # raises with what to write instead
    return value


def _leave_type(value: str) -> str:
    canonical = canonical_leave_type(value)
    if canonical is None:
        raise ValueError(f"unknown leave type {value!r}")
    return canonical


def _tool(value: str) -> str:
    if value not in set(ToolName):
        raise ValueError(f"unknown tool {value!r} (known: {', '.join(ToolName)})")
    return value


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TurnSpec(Strict):
    text: str = Field(min_length=1)
    answer: Literal["accept", "decline", "cancel"] | None = None
    person: str | None = None  # another person for this turn


class StartSpec(Strict):
    reason: str = Field(min_length=1, max_length=200)
    owner: str | None = None  # default: the scenario's person
    leave_type: str
    start: str
    end: str
    status: LeaveStatus = LeaveStatus.DRAFT

    _type = field_validator("leave_type")(_leave_type)
    _days = field_validator("start", "end")(_day)


class NewLeaveSpec(Strict):
    leave_type: str
    start: str
    end: str
    status: LeaveStatus = LeaveStatus.DRAFT
    owner: str | None = None  # default: the scenario's person

    _type = field_validator("leave_type")(_leave_type)
    _days = field_validator("start", "end")(_day)


class ExpectSpec(Strict):
    statuses: dict[str, LeaveStatus] = {}  # leave reason → its status at the end
    changes: int | None = Field(None, ge=0)  # how many changes were applied in all
    unchanged: bool = False  # nothing was changed
    new_leave: NewLeaveSpec | None = None  # exactly one leave was created, this one
    no_new_leave: bool = False
    tools: list[str] = []  # tools the model must have called
    balance_told: str | None = None  # the answer tells this leave type's remaining days

    _tools = field_validator("tools")(lambda v: [_tool(t) for t in v])
    _type = field_validator("balance_told")(lambda v: v if v is None else _leave_type(v))


class ScenarioSpec(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    what: str = ""
    person: str
    tool: str = ""
    phrasing: str = ""
    probe: bool = False
    turn: list[TurnSpec] = Field(min_length=1)
    start: list[StartSpec] = []
    expect: ExpectSpec

    _tool = field_validator("tool")(lambda v: v and _tool(v))


class PersonSpec(Strict):
    """Someone the demo data does not have: an employee, or a manager of others."""

    id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,16}$")
    name: str = Field(min_length=1, max_length=50)
    manager: str | None = None  # a demo employee's id or an earlier person's of the file
    token: str | None = Field(None, min_length=8)  # default: eval-token-<id>


class SiteFile(Strict):
    person: list[PersonSpec] = []
    scenario: list[ScenarioSpec] = Field(min_length=1)


def load(path: Path, taken: set[str]) -> tuple[Scenario, ...]:
    """The scenarios of a site's file; ValueError (one line) for the first thing wrong.
    `taken`: the names already used (the built-in ones, other files')."""
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path}: not TOML: {error}") from None
    try:
        site = SiteFile.model_validate(raw)
    except ValidationError as error:
        raise ValueError(f"{path}: {_first(error, raw)}") from None
    people = _people(site, path)
    _check(site, taken, path, people)
    return tuple(_scenario(spec, path, people) for spec in site.scenario)


def _people(site: SiteFile, path: Path) -> dict[str, StartPerson]:
    people: dict[str, StartPerson] = {}
    tokens = set(EMPLOYEE_OF)
    for number, person in enumerate(site.person, 1):
        where = f"{path}: person {number} ({person.id})"
        if person.id in TOKEN_OF or person.id in people:
            raise ValueError(f"{where}: id: taken already")
        if person.manager is not None and person.manager not in TOKEN_OF | people.keys():
            raise ValueError(f"{where}: manager: {person.manager!r} is no demo employee nor "
                             "a person the file names before")  # fmt: skip
        token = person.token or f"eval-token-{person.id}"
        if token in tokens:
            raise ValueError(f"{where}: token: taken already")
        tokens.add(token)
        people[person.id] = StartPerson(person.id, person.name, person.manager, token)
    return people


def _first(error: ValidationError, raw: dict[str, object]) -> str:
    """The first problem as one line: which scenario, which field, what is wrong."""
    problem = error.errors(include_url=False)[0]
    loc = list(problem["loc"])
    where = ""
    if loc[:1] == ["scenario"] and len(loc) > 1 and isinstance(loc[1], int):
        scenarios = raw.get("scenario")
        name = ""
        if isinstance(scenarios, list) and loc[1] < len(scenarios):
            entry = scenarios[loc[1]]
            name = str(entry.get("name", "")) if isinstance(entry, dict) else ""
        where = f"scenario {loc[1] + 1}{f' ({name})' if name else ''}: "
        loc = loc[2:]
    field = ".".join(str(part) for part in loc) or "file"
    message = problem["msg"].removeprefix("Value error, ")
    if problem["type"] == "extra_forbidden":
        message = "unknown field"
    elif problem["type"] == "missing":
        message = "missing"
    return f"{where}{field}: {message}"


def _check(site: SiteFile, taken: set[str], path: Path, people: dict[str, StartPerson]) -> None:
    """What the server would refuse or the suite could not tell apart, across the file."""
    today = dt.date.today()
    seen: set[str] = set()
    starts: dict[str, tuple[str, StartSpec, str]] = {}  # reason → (owner, leave, scenario)
    for spec in site.scenario:
        if spec.name in taken or spec.name in seen:
            raise ValueError(f"{path}: scenario {spec.name}: the name is taken already")
        seen.add(spec.name)
        named = [("person", spec.person)]
        named += [(f"turn.{i}.person", t.person) for i, t in enumerate(spec.turn) if t.person]
        named += [(f"start.{i}.owner", v.owner) for i, v in enumerate(spec.start) if v.owner]
        if spec.expect.new_leave and spec.expect.new_leave.owner:
            named.append(("expect.new_leave.owner", spec.expect.new_leave.owner))
        for field, value in named:
            try:
                _person(value, people)
            except ValueError as error:
                raise ValueError(f"{path}: scenario {spec.name}: {field}: {error}") from None
        for leave in spec.start:
            owner = _person(leave.owner or spec.person, people)
            where = f"{path}: scenario {spec.name}: start leave {leave.reason!r}"
            first, last = on(leave.start, today), on(leave.end, today)
            if last < first:
                raise ValueError(f"{where}: ends before it starts")
            if not working_days(first, last):
                raise ValueError(f"{where}: no working day in it (the server refuses it)")
            if leave.reason in SEEDED:
                raise ValueError(f"{where}: the demo data has a leave of that reason already")
            if leave.reason in starts:
                other_owner, other, other_name = starts[leave.reason]
                # the same leave (whoever's person it defaults to): one row, no conflict
                same = ("leave_type", "start", "end", "status")
                if (other_owner, *(getattr(other, k) for k in same)) != (
                    owner,
                    *(getattr(leave, k) for k in same),
                ):
                    raise ValueError(f"{where}: conflicts with scenario {other_name}'s leave of "
                                     "the same reason (another person or other days)")  # fmt: skip
                continue
            _no_overlap(where, owner, leave, starts, today)
            starts[leave.reason] = (owner, leave, spec.name)
        known = set(SEEDED) | {leave.reason for leave in spec.start}
        for reason in spec.expect.statuses:
            if reason not in known:
                raise ValueError(f"{path}: scenario {spec.name}: expect.statuses: no leave of "
                                 f"reason {reason!r} in the demo data or its start")  # fmt: skip
        expect = spec.expect
        if not (expect.statuses or expect.changes is not None or expect.unchanged
                or expect.new_leave or expect.no_new_leave or expect.tools
                or expect.balance_told):  # fmt: skip
            raise ValueError(f"{path}: scenario {spec.name}: expect: says nothing to check")


def _no_overlap(
    where: str,
    owner: str,
    leave: StartSpec,
    starts: dict[str, tuple[str, StartSpec, str]],
    today: dt.date,
) -> None:
    """The server refuses a leave over another of the same person's (but a rejected or
    cancelled one); starting data it would refuse is refused here."""
    if leave.status in NOT_BLOCKING:
        return
    first, last = on(leave.start, today), on(leave.end, today)
    monday = today + dt.timedelta(days=7 - today.weekday())
    for seeded_owner, _, weeks, offset, length, status, reason in LEAVES:
        begins = monday + dt.timedelta(weeks=weeks, days=offset)
        ends = begins + dt.timedelta(days=length - 1)
        if (
            seeded_owner == owner
            and status not in NOT_BLOCKING
            and begins <= last
            and ends >= first
        ):
            raise ValueError(f"{where}: overlaps the demo leave {reason!r} of {owner}")
    for other_owner, other, name in starts.values():
        if other_owner != owner or other.status in NOT_BLOCKING:
            continue
        if on(other.start, today) <= last and on(other.end, today) >= first:
            raise ValueError(f"{where}: overlaps scenario {name}'s leave {other.reason!r}")


def _scenario(spec: ScenarioSpec, path: Path, people: dict[str, StartPerson]) -> Scenario:
    tokens = TOKEN_OF | {p.employee_id: p.token for p in people.values()}

    def who(value: str | None) -> str:
        return _person(value or spec.person, people)

    turns = tuple(Turn(t.text, t.answer, tokens[who(t.person)]) for t in spec.turn)
    before = tuple(
        StartLeave(s.reason, who(s.owner), s.leave_type, s.start, s.end, s.status)
        for s in spec.start
    )
    return Scenario(
        spec.name,
        spec.what or spec.name,
        turns,
        _goal(spec, people),
        probe=spec.probe,
        before=before,
        tool=spec.tool,
        phrasing=spec.phrasing,
        source=path.name,
        people=tuple(people.values()),
    )


def _goal(spec: ScenarioSpec, people: dict[str, StartPerson]) -> Goal:
    expect = spec.expect
    person = _person(spec.person, people)
    told = balance_told(expect.balance_told, person) if expect.balance_told else None

    def new_leave_is(end: EndState, want: NewLeaveSpec) -> bool:
        new = end.new_leaves()
        owner = _person(want.owner, people) if want.owner else person
        return len(new) == 1 and _matches(new[0], want, owner, end.today)

    def check(end: EndState) -> bool:
        return (
            all(end.statuses.get(reason) == status for reason, status in expect.statuses.items())
            and (expect.changes is None or len(end.applied) == expect.changes)
            and (not expect.unchanged or not end.applied)
            and (expect.new_leave is None or new_leave_is(end, expect.new_leave))
            and (not expect.no_new_leave or not end.new_leaves())
            and all(tool in end.tools for tool in expect.tools)
            and (told is None or told(end))
        )

    # the calls a right run makes: each leave moved from the status it starts in, the new one
    was = {reason: status for reason, (_, status) in SEEDED.items()}
    was |= {leave.reason: leave.status for leave in spec.start}
    calls = [RightCall(ToolName.SEARCH_LEAVES)] if expect.statuses else []
    calls += [change_call(reason, status) for reason, status in expect.statuses.items()
              if status != was.get(reason)]  # fmt: skip
    if expect.new_leave:
        want = expect.new_leave
        days = {"start_date": f"{{date:{want.start}}}", "end_date": f"{{date:{want.end}}}"}
        calls.append(RightCall(ToolName.CREATE_LEAVE, {"leave_type": want.leave_type, **days}))
    if expect.balance_told:
        calls.append(RightCall(ToolName.GET_LEAVE_BALANCE))
    return Expect(check, tuple(calls))


def _matches(leave: LeaveRow, want: NewLeaveSpec, owner: str, today: dt.date) -> bool:
    return (leave.owner, leave.leave_type, leave.status, leave.start, leave.end) == (
        owner,
        want.leave_type,
        want.status,
        on(want.start, today),
        on(want.end, today),
    )
