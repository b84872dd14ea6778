"""The leave rules, independent of MCP: who may see and change which leave, and how.

Every method takes the acting employee's id, scopes every read to what that employee may see,
and raises `Refusal` when a rule says no. State changes are one transaction each, with a
compare-and-set on the old status and an audit entry, which names the front end that acted for
the employee when one did (`front_end`).

SQLite runs one writer at a time (BEGIN IMMEDIATE); PostgreSQL's READ COMMITTED lets writers
interleave, so whatever a write decides from an earlier read is guarded here by a row lock
(FOR UPDATE, which SQLite leaves out) or by an UPDATE whose WHERE re-checks the condition.
"""

from __future__ import annotations

import datetime as dt
import secrets
import typing
from functools import partial

from sqlalchemy import ColumnElement, String, bindparam, cast, literal_column, or_, select, update
from sqlalchemy.engine import CursorResult, Result
from sqlalchemy.orm import Session
from sqlalchemy.sql.expression import Executable

from common.contract import (
    LEAVE_TYPE_BY_NAME,
    LEAVE_TYPES,
    NEXT_STATUSES,
    LeaveStatus,
    RefusalCode,
    ToolName,
    canonical_leave_type,
)
from common.dbapi import CompiledStatement, Row
from common.sqlite import utcnow

from .identity import FrontEnd
from .messages import Refusal
from .schemas import BalanceLine, BalanceResult, LeaveView
from .storage import (
    AsyncStore,
    AuditEntry,
    Balance,
    Database,
    Employee,
    Leave,
    PendingConfirmation,
)

HOURS_PER_DAY = 8
MAX_SEARCH_RESULTS = 20
# Every word of a search is one more OR of LIKEs that must all hold: unbounded input would build
# an expression SQLite refuses (~1,000 words) or spends seconds of CPU on.
MAX_KEYWORD_CHARS = 100
MAX_KEYWORD_WORDS = 8

# What update_leave_status may set: every status some one-step move leads to, in the order of
# the life cycle (its refusal lists them so); search_leaves filters by any status.
UPDATABLE_STATUSES = tuple(dict.fromkeys(s for steps in NEXT_STATUSES.values() for s in steps))
ALL_STATUSES = tuple(LeaveStatus)


def new_leave_id() -> str:
    return f"LV-{secrets.token_hex(3)}"


def working_days(start: dt.date, end: dt.date) -> int:
    return sum(1 for i in range((end - start).days + 1) if (start + dt.timedelta(i)).weekday() < 5)


# LIKE patterns are bound values: the user's "%" and "_" are escaped with this character, so
# they match themselves (what `autoescape` does for literal values).
LIKE_ESCAPE = "/"


# The canonical leave types, and the names (aliases) of each, that a search word may name.
TYPE_SLOTS = tuple(sorted(set(LEAVE_TYPE_BY_NAME.values())))
TYPE_NAMES = {
    canonical: tuple(name for name, of in LEAVE_TYPE_BY_NAME.items() if of == canonical)
    for canonical in TYPE_SLOTS
}


def _matches(word: int) -> ColumnElement[bool]:
    """Search word number `word` (bound as term_<n>, and type_<n>_<slot> for the types it
    names) against the reason, type (or an alias of it), dates, ID and owner."""
    term = bindparam(f"term_{word}", type_=String())
    return or_(
        Leave.reason.icontains(term, escape=LIKE_ESCAPE),
        Leave.leave_type.icontains(term, escape=LIKE_ESCAPE),
        Leave.id.icontains(term, escape=LIKE_ESCAPE),
        Employee.name.icontains(term, escape=LIKE_ESCAPE),
        cast(Leave.start_date, String).contains(term, escape=LIKE_ESCAPE),
        cast(Leave.end_date, String).contains(term, escape=LIKE_ESCAPE),
        Leave.leave_type.in_(
            [bindparam(f"type_{word}_{slot}", type_=String()) for slot in range(len(TYPE_SLOTS))]
        ),
    )


# A search row: the leave's fields, then its owner's (see _search_statement).
SEARCH_COLUMNS = (
    Leave.id,
    Leave.leave_type,
    Leave.start_date,
    Leave.end_date,
    Leave.days,
    Leave.status,
    Leave.reason,
    Employee.id,
    Employee.name,
    Employee.manager_id,
)


def _search_statement(words: int, with_status: bool) -> Executable:
    """The search for `words` words, one shape: compiled once per shape and database by
    LeaveService, it is run on the driver's cursor (see common.dbapi), its columns made into
    views directly: building the query took most of a search's CPU, the ORM's execution and
    loading most of what was left."""
    actor = bindparam("actor_id", type_=String())
    # The actor's own leaves and their reports', found through the employees first: the same
    # rows as "owner is the actor or the owner's manager is", which no index serves (every
    # search scanned every leave: 8.5 ms at 50,000 leaves), where this reads the leaves of a
    # handful of employees by ix_leaves_employee_id.
    visible_owners = select(Employee.id).where(
        or_(Employee.id == actor, Employee.manager_id == actor)
    )
    query = (
        select(*SEARCH_COLUMNS)
        .join(Employee, Leave.employee_id == Employee.id)
        .where(Leave.employee_id.in_(visible_owners))
    )
    if with_status:
        # status || '': an expression, which no database reads through ix_leaves_status;
        # SQLite, knowing nothing of how many leaves share a status, would otherwise read
        # every leave of that status instead of the few of the owners.
        status = Leave.status.concat(literal_column("''"))
        query = query.where(status == bindparam("status", type_=String()))
    for word in range(words):  # every word must match somewhere
        query = query.where(_matches(word))
    return query.order_by(Leave.start_date.desc()).limit(MAX_SEARCH_RESULTS)


def _search_values(actor_id: str, words: list[str], status: str | None) -> dict[str, typing.Any]:
    values: dict[str, typing.Any] = {"actor_id": actor_id}
    if status:
        values["status"] = status
    for word, term in enumerate(words):
        escaped = (
            term.replace(LIKE_ESCAPE, LIKE_ESCAPE * 2)
            .replace("%", f"{LIKE_ESCAPE}%")
            .replace("_", f"{LIKE_ESCAPE}_")
        )
        values[f"term_{word}"] = escaped
        # the types the word names (an alias or part of one), in fixed slots; NULL matches none
        named = [t for t in TYPE_SLOTS if any(term.casefold() in n for n in TYPE_NAMES[t])]
        for slot in range(len(TYPE_SLOTS)):
            values[f"type_{word}_{slot}"] = named[slot] if slot < len(named) else None
    return values


def parse_date(value: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value.strip())
    except (ValueError, AttributeError):
        raise Refusal(RefusalCode.INVALID_DATE, value=value) from None


class LeaveService:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._searches: dict[tuple[int, bool], CompiledStatement] = {}

    # -- reads --------------------------------------------------------------------------

    def search(self, actor_id: str, keyword: str, status: str | None) -> list[LeaveView]:
        if status is not None and status not in ALL_STATUSES:
            raise Refusal(RefusalCode.INVALID_STATUS, requested=status, valid=ALL_STATUSES)
        words = keyword.split()
        if len(keyword) > MAX_KEYWORD_CHARS or len(words) > MAX_KEYWORD_WORDS:
            raise Refusal(
                RefusalCode.KEYWORD_TOO_LONG,
                max_chars=MAX_KEYWORD_CHARS,
                max_words=MAX_KEYWORD_WORDS,
            )
        shape = (len(words), bool(status))
        search = self._searches.get(shape)
        if search is None:
            search = CompiledStatement(_search_statement(*shape), self.db.engine.dialect)
            self._searches[shape] = search
        with self.db.cursor() as cursor:
            rows = search.all(cursor, _search_values(actor_id, words, status))
        # A row names the actor as its owner or its owner's manager, so (foreign keys) the
        # actor exists; only an empty answer needs to look.
        if not rows:
            with self.db.read() as s:
                self._employee(s, actor_id)
        return [_row_view(row, actor_id) for row in rows]

    def balance(self, actor_id: str) -> BalanceResult:
        with self.db.read() as s:
            actor = self._employee(s, actor_id)
            rows = s.scalars(select(Balance).where(Balance.employee_id == actor.id)).all()
            by_type = {b.leave_type: b.remaining_days for b in rows}
            lines = [
                BalanceLine(
                    leave_type=t,
                    remaining_days=by_type.get(t, 0.0),
                    remaining_hours=by_type.get(t, 0.0) * HOURS_PER_DAY,
                )
                for t in LEAVE_TYPES
            ]
            return BalanceResult(employee_id=actor.id, employee_name=actor.name, balances=lines)

    def visible_leave(self, actor_id: str, leave_id: str) -> LeaveView:
        with self.db.read() as s:
            actor = self._employee(s, actor_id)
            leave, owner = self._visible(s, actor, leave_id)
            return self._view(leave, owner, actor.id)

    # -- writes -------------------------------------------------------------------------

    def create(
        self,
        actor_id: str,
        leave_type: str,
        start_date: str,
        end_date: str,
        reason: str,
        front_end: FrontEnd | None = None,
    ) -> LeaveView:
        canonical = canonical_leave_type(leave_type)
        if canonical is None:
            raise Refusal(
                RefusalCode.INVALID_LEAVE_TYPE, value=leave_type, allowed="、".join(LEAVE_TYPES)
            )
        start, end = parse_date(start_date), parse_date(end_date)
        if end < start:
            raise Refusal(RefusalCode.END_BEFORE_START, start_date=start, end_date=end)
        days = working_days(start, end)
        if days == 0:
            raise Refusal(RefusalCode.NO_WORKING_DAYS, start_date=start, end_date=end)
        reason = reason.strip()
        if not 1 <= len(reason) <= 200:
            raise Refusal(RefusalCode.INVALID_REASON)
        with self.db.write() as s:
            # Locking the owner queues their concurrent creations: each sees the others' rows
            # in its overlap check.
            actor = self._employee(s, actor_id, lock=True)
            clash = s.scalars(
                select(Leave).where(
                    Leave.employee_id == actor.id,
                    Leave.status.not_in((LeaveStatus.CANCELLED, LeaveStatus.REJECTED)),
                    Leave.start_date <= end,
                    Leave.end_date >= start,
                )
            ).first()
            if clash is not None:
                raise Refusal(
                    RefusalCode.OVERLAP,
                    other_id=clash.id,
                    other_start=clash.start_date,
                    other_end=clash.end_date,
                    other_status=clash.status,
                )
            leave_id = new_leave_id()
            while s.get(Leave, leave_id) is not None:
                leave_id = new_leave_id()
            leave = Leave(
                id=leave_id,
                employee_id=actor.id,
                leave_type=canonical,
                start_date=start,
                end_date=end,
                days=float(days),
                status=LeaveStatus.DRAFT,
                reason=reason,
            )
            s.add(leave)
            s.add(
                AuditEntry(
                    leave_id=leave_id,
                    actor_id=actor.id,
                    tool=ToolName.CREATE_LEAVE,
                    from_status=None,
                    to_status=LeaveStatus.DRAFT,
                    confirmation=None,
                    outcome="applied",
                    **_through(front_end),
                )
            )
            s.flush()
            return self._view(leave, actor, actor.id)

    def change_status(
        self, actor_id: str, leave_id: str, requested: str, front_end: FrontEnd | None = None
    ) -> tuple[str, LeaveView]:
        """Move a leave exactly one step forward; returns the old status and the new view."""
        requested = requested.strip().lower()
        with self.db.write() as s:
            actor = self._employee(s, actor_id)
            leave, owner = self._visible(s, actor, leave_id)
            current = leave.status
            if requested not in UPDATABLE_STATUSES:
                if current == LeaveStatus.APPROVED:
                    raise Refusal(RefusalCode.USE_CANCEL_TOOL, leave_id=leave.id, current=current)
                raise Refusal(
                    RefusalCode.INVALID_STATUS, requested=requested, valid=UPDATABLE_STATUSES
                )
            allowed = next_steps(leave.status, owner.id, owner.manager_id, actor.id)
            if requested not in allowed:
                self._refuse_step(leave, owner, actor, requested, allowed)
            # The status first: a concurrent decision then loses as a conflict, before it
            # could look at a balance the winner has just used.
            self._compare_and_set(s, leave, current, requested)
            if requested == LeaveStatus.APPROVED:
                self._deduct(s, leave)
            s.add(
                AuditEntry(
                    leave_id=leave.id,
                    actor_id=actor.id,
                    tool=ToolName.UPDATE_LEAVE_STATUS,
                    from_status=current,
                    to_status=requested,
                    confirmation=None,
                    outcome="applied",
                    **_through(front_end),
                )
            )
            return current, self._view(leave, owner, actor.id)

    def check_cancellable(self, actor_id: str, leave_id: str) -> LeaveView:
        """Raises unless the actor may cancel this approved leave (run before asking the human)."""
        with self.db.read() as s:
            actor = self._employee(s, actor_id)
            leave, owner = self._visible(s, actor, leave_id)
            self._require_cancellable(leave, actor)
            return self._view(leave, owner, actor.id)

    def cancel_approved(
        self, actor_id: str, leave_id: str, front_end: FrontEnd | None = None
    ) -> LeaveView:
        """approved → cancelled, restoring the balance. Call only after an accepted confirmation."""
        try:
            return self._cancel_approved(actor_id, leave_id, front_end)
        except Refusal:  # accepted, but a rule said no meanwhile (e.g. a concurrent change)
            self.record_not_applied(actor_id, leave_id, "accepted", front_end)
            raise

    def _cancel_approved(
        self, actor_id: str, leave_id: str, front_end: FrontEnd | None
    ) -> LeaveView:
        with self.db.write() as s:
            actor = self._employee(s, actor_id)
            leave, owner = self._visible(s, actor, leave_id)
            self._require_cancellable(leave, actor)
            self._settle_confirmation(s, actor.id, leave.id, ToolName.CANCEL_APPROVED_LEAVE)
            self._compare_and_set(s, leave, LeaveStatus.APPROVED, LeaveStatus.CANCELLED)
            s.execute(
                update(Balance)
                .where(
                    Balance.employee_id == leave.employee_id, Balance.leave_type == leave.leave_type
                )
                .values(remaining_days=Balance.remaining_days + leave.days)
            )
            s.add(
                AuditEntry(
                    leave_id=leave.id,
                    actor_id=actor.id,
                    tool=ToolName.CANCEL_APPROVED_LEAVE,
                    from_status=LeaveStatus.APPROVED,
                    to_status=LeaveStatus.CANCELLED,
                    confirmation="accepted",
                    outcome="applied",
                    **_through(front_end),
                )
            )
            return self._view(leave, owner, actor.id)

    def record_not_applied(
        self,
        actor_id: str,
        leave_id: str,
        confirmation: str,
        front_end: FrontEnd | None = None,
    ) -> None:
        """Audit an answered confirmation that changed nothing (declined, cancelled, or accepted
        but refused); the leave itself is not touched."""
        with self.db.write() as s:
            self._settle_confirmation(s, actor_id, leave_id.strip(), ToolName.CANCEL_APPROVED_LEAVE)
            leave = s.get(Leave, leave_id)
            status = leave.status if leave else None
            s.add(
                AuditEntry(
                    leave_id=leave_id,
                    actor_id=actor_id,
                    tool=ToolName.CANCEL_APPROVED_LEAVE,
                    from_status=status,
                    to_status=status,
                    confirmation=confirmation,
                    outcome="not_applied",
                    **_through(front_end),
                )
            )

    def confirmation_asked(
        self, actor_id: str, leave_id: str, tool: str, front_end: FrontEnd | None = None
    ) -> None:
        """Remember a question until its answer arrives (or it is audited as abandoned)."""
        with self.db.write() as s:
            s.add(
                PendingConfirmation(
                    leave_id=leave_id, actor_id=actor_id, tool=tool, **_through(front_end)
                )
            )

    def audit_abandoned(self, asked_before: dt.datetime) -> int:
        """Audit every confirmation asked before `asked_before` and never answered: its client
        cancelled, crashed or went away. Returns how many."""
        with self.db.write() as s:
            # Every replica sweeps: a row another sweeper (or an answer) holds is theirs.
            stale = s.scalars(
                select(PendingConfirmation)
                .where(PendingConfirmation.asked_at < asked_before)
                .with_for_update(skip_locked=True)
            ).all()
            for pending in stale:
                leave = s.get(Leave, pending.leave_id)
                status = leave.status if leave else None
                s.add(
                    AuditEntry(
                        leave_id=pending.leave_id,
                        actor_id=pending.actor_id,
                        tool=pending.tool,
                        from_status=status,
                        to_status=status,
                        confirmation="abandoned",
                        outcome="not_applied",
                        front_end=pending.front_end,
                        front_end_token_id=pending.front_end_token_id,
                    )
                )
                s.delete(pending)
            return len(stale)

    @staticmethod
    def _settle_confirmation(s: Session, actor_id: str, leave_id: str, tool: str) -> None:
        """The answer arrived: the oldest open question of this kind is no longer pending."""
        oldest = s.scalars(
            select(PendingConfirmation)
            .where(
                PendingConfirmation.actor_id == actor_id,
                PendingConfirmation.leave_id == leave_id,
                PendingConfirmation.tool == tool,
            )
            .order_by(PendingConfirmation.id)
            .limit(1)
            .with_for_update()  # not audited as abandoned by a sweeper at the same time
        ).first()
        if oldest is not None:
            s.delete(oldest)

    def audit_trail(self, leave_id: str) -> list[AuditEntry]:
        with self.db.read() as s:
            return list(
                s.scalars(
                    select(AuditEntry)
                    .where(AuditEntry.leave_id == leave_id)
                    .order_by(AuditEntry.id)
                )
            )

    # -- helpers ------------------------------------------------------------------------

    @staticmethod
    def _employee(s: Session, employee_id: str, *, lock: bool = False) -> Employee:
        employee = s.get(Employee, employee_id, with_for_update=lock)
        if employee is None:
            raise LookupError(f"token maps to missing employee {employee_id}")
        return employee

    @staticmethod
    def _visible(s: Session, actor: Employee, leave_id: str) -> tuple[Leave, Employee]:
        """The leave if the actor owns it or manages its owner; else indistinguishable from
        a leave that does not exist."""
        leave = s.get(Leave, leave_id.strip()) if isinstance(leave_id, str) else None
        owner = s.get(Employee, leave.employee_id) if leave else None
        if leave is None or owner is None or actor.id not in (owner.id, owner.manager_id):
            raise Refusal(RefusalCode.UNKNOWN_LEAVE_ID, leave_id=leave_id)
        return leave, owner

    @staticmethod
    def _refuse_step(
        leave: Leave, owner: Employee, actor: Employee, requested: str, allowed: list[str]
    ) -> None:
        status = leave.status
        if status == LeaveStatus.APPROVED:
            raise Refusal(RefusalCode.USE_CANCEL_TOOL, leave_id=leave.id, current=status)
        if (
            status == LeaveStatus.DRAFT
            and actor.id != owner.id
            and requested == LeaveStatus.SUBMITTED
        ):
            raise Refusal(RefusalCode.FORBIDDEN, why="owner_only_submit")
        if status == LeaveStatus.SUBMITTED and requested in (
            LeaveStatus.APPROVED,
            LeaveStatus.REJECTED,
        ):
            why = "self_approval" if actor.id == owner.id else "manager_only_decide"
            raise Refusal(RefusalCode.FORBIDDEN, why=why)
        # Name the step that IS allowed for this leave, whoever may take it.
        natural = list(NEXT_STATUSES.get(status, ()))
        raise Refusal(
            RefusalCode.WRONG_STEP,
            leave_id=leave.id,
            current=status,
            requested=requested,
            allowed=allowed or natural,
        )

    @staticmethod
    def _require_cancellable(leave: Leave, actor: Employee) -> None:
        if leave.status != LeaveStatus.APPROVED:
            raise Refusal(RefusalCode.NOT_CANCELLABLE, leave_id=leave.id, current=leave.status)
        if leave.employee_id != actor.id:
            raise Refusal(RefusalCode.FORBIDDEN, why="owner_only_cancel")

    @staticmethod
    def _deduct(s: Session, leave: Leave) -> None:
        result = s.execute(
            update(Balance)
            .where(
                Balance.employee_id == leave.employee_id,
                Balance.leave_type == leave.leave_type,
                Balance.remaining_days >= leave.days,
            )
            .values(remaining_days=Balance.remaining_days - leave.days)
        )
        if _rowcount(result) != 1:
            balance = s.get(Balance, (leave.employee_id, leave.leave_type))
            raise Refusal(
                RefusalCode.INSUFFICIENT_BALANCE,
                leave_type=leave.leave_type,
                remaining=balance.remaining_days if balance else 0,
                leave_id=leave.id,
                days=leave.days,
            )

    @staticmethod
    def _compare_and_set(s: Session, leave: Leave, old: str, new: str) -> None:
        result = s.execute(
            update(Leave)
            .where(Leave.id == leave.id, Leave.status == old)
            .values(status=new, updated_at=utcnow())
            .execution_options(synchronize_session=False)
        )
        if _rowcount(result) != 1:  # someone else moved it first; the transaction rolls back
            current = s.scalar(select(Leave.status).where(Leave.id == leave.id))
            raise Refusal(RefusalCode.CONFLICT, leave_id=leave.id, current=current or old)
        leave.status = new

    @staticmethod
    def _view(leave: Leave, owner: Employee, actor_id: str) -> LeaveView:
        row = (
            leave.id,
            leave.leave_type,
            leave.start_date,
            leave.end_date,
            leave.days,
            leave.status,
            leave.reason,
            owner.id,
            owner.name,
            owner.manager_id,
        )
        return _row_view(row, actor_id)


class LeaveStore(AsyncStore):
    """The leave rules as the serving process calls them: LeaveService's methods that the tools,
    the readiness probe and the audit of abandoned confirmations use, each a coroutine that
    runs where it should (see AsyncStore). `sync` is the service itself."""

    def __init__(self, service: LeaveService) -> None:
        super().__init__(service.db)
        self.sync = service

    async def search(self, actor_id: str, keyword: str, status: str | None) -> list[LeaveView]:
        return await self._read(partial(self.sync.search, actor_id, keyword, status))

    async def balance(self, actor_id: str) -> BalanceResult:
        return await self._read(partial(self.sync.balance, actor_id))

    async def create(
        self,
        actor_id: str,
        leave_type: str,
        start_date: str,
        end_date: str,
        reason: str,
        front_end: FrontEnd | None = None,
    ) -> LeaveView:
        return await self._on_thread(
            partial(self.sync.create, actor_id, leave_type, start_date, end_date, reason, front_end)
        )

    async def change_status(
        self, actor_id: str, leave_id: str, requested: str, front_end: FrontEnd | None = None
    ) -> tuple[str, LeaveView]:
        return await self._on_thread(
            partial(self.sync.change_status, actor_id, leave_id, requested, front_end)
        )

    async def check_cancellable(self, actor_id: str, leave_id: str) -> LeaveView:
        return await self._on_thread(partial(self.sync.check_cancellable, actor_id, leave_id))

    async def confirmation_asked(
        self, actor_id: str, leave_id: str, tool: str, front_end: FrontEnd | None = None
    ) -> None:
        await self._on_thread(
            partial(self.sync.confirmation_asked, actor_id, leave_id, tool, front_end)
        )

    async def record_not_applied(
        self,
        actor_id: str,
        leave_id: str,
        confirmation: str,
        front_end: FrontEnd | None = None,
    ) -> None:
        await self._on_thread(
            partial(self.sync.record_not_applied, actor_id, leave_id, confirmation, front_end)
        )

    async def cancel_approved(
        self, actor_id: str, leave_id: str, front_end: FrontEnd | None = None
    ) -> LeaveView:
        return await self._on_thread(
            partial(self.sync.cancel_approved, actor_id, leave_id, front_end)
        )

    async def audit_abandoned(self, asked_before: dt.datetime) -> int:
        return await self._on_thread(partial(self.sync.audit_abandoned, asked_before))

    async def ping(self) -> None:
        """Whether the leave database answers (raises if not)."""
        await self._on_thread(self.sync.db.ping)


def _through(front_end: FrontEnd | None) -> dict[str, str | None]:
    """The audit columns naming the front end that acted for the actor (none: NULL)."""
    if front_end is None:
        return {"front_end": None, "front_end_token_id": None}
    return {"front_end": front_end.name, "front_end_token_id": front_end.token_id}


def next_steps(status: str, owner_id: str, manager_id: str | None, actor_id: str) -> list[str]:
    """The one-step moves this actor may make: the owner submits, the manager decides."""
    if status == LeaveStatus.DRAFT and actor_id == owner_id:
        return list(NEXT_STATUSES[LeaveStatus.DRAFT])
    if status == LeaveStatus.SUBMITTED and actor_id == manager_id and actor_id != owner_id:
        return list(NEXT_STATUSES[LeaveStatus.SUBMITTED])
    return []


def _row_view(row: Row, actor_id: str) -> LeaveView:
    """A search row (SEARCH_COLUMNS' values) as the actor sees it."""
    leave_id, leave_type, start, end, days, status, reason, owner_id, owner_name, manager = row
    return LeaveView(
        leave_id=leave_id,
        employee_id=owner_id,
        employee_name=owner_name,
        leave_type=leave_type,
        start_date=start.isoformat(),
        end_date=end.isoformat(),
        days=days,
        hours=days * HOURS_PER_DAY,
        status=status,
        reason=reason,
        next_steps=next_steps(status, owner_id, manager, actor_id),
    )


def _rowcount(result: Result[typing.Any]) -> int:
    """Rows an UPDATE matched (Session.execute is typed as returning the general Result)."""
    return typing.cast(CursorResult[typing.Any], result).rowcount
