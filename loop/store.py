"""Run records and session histories, persisted with SQLAlchemy (SQLite by default).

Run records keep the whole transcript and the tools that were offered, so finished runs can be
exported as fine-tuning data. Users are stored as a hash of their token, never the token (a
person a front end acts for: a hash of their email, loop/acting_for.py).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio.to_thread
from sqlalchemy import (
    JSON,
    Column,
    Integer,
    String,
    Table,
    Text,
    bindparam,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.engine.interfaces import DBAPICursor
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from common.contract import StepKind, StepOutcome
from common.dbapi import CompiledStatement, integrity_error, pooled_transaction
from common.migrations import log_upgrade, upgrade
from common.runs_protocol import RunReason, RunReasonCode
from common.schema import UtcDateTime
from common.sqlite import (
    NonWaitingWriter,
    WriteLockTaken,
    create_engine_for,
    utcnow,
    write_transaction_begin,
)

from .migrations import MIGRATIONS

if TYPE_CHECKING:
    from .engine import RunResult

logger = logging.getLogger(__name__)
T = TypeVar("T")


class Base(DeclarativeBase):
    pass


class RunRecord(Base):
    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    user_key: Mapped[str] = mapped_column(String(64), index=True)
    session_id: Mapped[str] = mapped_column(String(64), index=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    input: Mapped[str] = mapped_column(Text)
    answer: Mapped[str] = mapped_column(Text, default="")
    reason: Mapped[str | None] = mapped_column(String(500))
    result: Mapped[Any] = mapped_column(JSON, nullable=True)
    steps: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    messages: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    tools: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    system_prompt: Mapped[str] = mapped_column(Text, default="")
    history: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    turns: Mapped[int] = mapped_column(Integer, default=0)
    tool_errors: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow, index=True)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime)
    # The loop process running it (LOOP_INSTANCE_ID): another loop on the same store leaves a
    # run it does not own alone while its owner renews its lease.
    owner: Mapped[str | None] = mapped_column(String(128), index=True)
    # While the run waits for a person's confirmation: what resuming it after its loop stops
    # needs (the engine's state, the questions, when they expire); NULL otherwise.
    suspended: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))

    def finish(self, result: RunResult, history: list[dict[str, Any]]) -> None:
        """Take how the run ended: its result, and the history it was given."""
        for name in RESULT_COLUMNS:
            setattr(self, name, getattr(result, name))
        self.reason = None if result.reason is None else str(result.reason)  # its stored form
        self.steps = [step.to_dict() for step in result.steps]
        self.history = history
        self.finished_at = utcnow()


class LoopInstance(Base):
    """A loop process's lease on the runs it owns, renewed while it lives."""

    __tablename__ = "loop_instances"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    renewed_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    # Where the other loops reach it (LOOP_PEER_URL); NULL: they cannot.
    url: Mapped[str | None] = mapped_column(String(512))


class SessionRecord(Base):
    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_key: Mapped[str] = mapped_column(String(64), index=True)
    messages: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    updated_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)


def _interrupted(step: dict[str, Any]) -> dict[str, Any]:
    """A step saved while in progress, as the end of its process left it."""
    if step.get("type") == StepKind.TOOL and step.get("error") == StepOutcome.IN_PROGRESS:
        return {**step, "error": StepOutcome.INTERRUPTED, "detail": "outcome unknown"}
    return step


def _still_waiting(suspended: dict[str, Any] | None, now: dt.datetime) -> bool:
    """A run saved while a confirmation waited, whose question has not expired."""
    if not suspended or not suspended.get("confirmations"):
        return False
    return dt.datetime.fromisoformat(suspended["expires_at"]) > now


def _mark_interrupted(record: RunRecord) -> None:
    steps = [_interrupted(step) for step in record.steps or []]
    started = [
        f"{step['name']}({json.dumps(step.get('arguments'), ensure_ascii=False)})"
        for step in steps
        if step.get("error") == StepOutcome.INTERRUPTED
    ]
    detail = "the loop service running it stopped during the run"
    if started:
        detail += (
            f"; {', '.join(started)} had started and its outcome is unknown: check "
            "the leave (search_leaves) before doing it again"
        )
    record.steps = steps
    record.status = "failed"
    record.reason = str(RunReason(RunReasonCode.INTERRUPTED, detail))[:500]
    record.finished_at = utcnow()
    record.suspended = None


def bounded_history(messages: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """The newest messages within `limit`, starting at a user message so that no tool message
    is separated from the assistant call it answers."""
    if len(messages) <= limit:
        return messages
    tail = messages[-limit:]
    for i, message in enumerate(tail):
        if message.get("role") == "user":
            return tail[i:]
    return []


RUNS = cast(Table, RunRecord.__table__)
SESSIONS = cast(Table, SessionRecord.__table__)
RUN_COLUMNS = tuple(column.key for column in RUNS.columns)
SESSION_COLUMNS = tuple(column.key for column in SESSIONS.columns)
# What a finished run adds to its record (the rest is written when it starts): these from its
# result (engine.RunResult), where they have the same names, and its steps, history and end.
RESULT_COLUMNS = (
    "status",
    "answer",
    "reason",
    "result",
    "messages",
    "tools",
    "prompt_tokens",
    "completion_tokens",
    "turns",
    "tool_errors",
)
FINISHED_COLUMNS = (*RESULT_COLUMNS, "steps", "history", "finished_at")
# A value the finished record leaves unset (None) keeps what its start stored.
FINISH_RUN = (
    update(RUNS)
    .where(RUNS.c.id == bindparam("run_id"))
    .values(
        {
            **{
                name: func.coalesce(bindparam(f"new_{name}", type_=RUNS.c[name].type), RUNS.c[name])
                for name in FINISHED_COLUMNS
            },
            "suspended": None,  # a finished run has nothing left to resume
        }
    )
)
UPDATE_RUNNING_STEPS = (
    update(RUNS)
    .where(RUNS.c.id == bindparam("run_id"), RUNS.c.status == "running")
    .values(steps=bindparam("steps"), suspended=bindparam("suspended"))
)
SELECT_SESSION = select(SESSIONS.c.user_key, SESSIONS.c.messages).where(
    SESSIONS.c.id == bindparam("session_id")
)
# Read-modify-write of a session's history: the row lock queues concurrent appends where the
# database does not (PostgreSQL; SQLite's writers already queue, and it leaves FOR UPDATE out).
SELECT_SESSION_FOR_UPDATE = SELECT_SESSION.with_for_update()
UPDATE_SESSION = update(SESSIONS).where(SESSIONS.c.id == bindparam("session_id"))


class _Writes:
    """The writes a run makes (started, around each write, finished), compiled for the store's
    database and run on the DBAPI cursor (see common.dbapi): the ORM's unit of work, and then
    Core's execution, each cost more CPU than the database."""

    def __init__(self, dialect: Dialect) -> None:
        self.insert_run = CompiledStatement(insert(RUNS), dialect, RUN_COLUMNS)
        self.finish_run = CompiledStatement(FINISH_RUN, dialect)
        self.save_steps = CompiledStatement(UPDATE_RUNNING_STEPS, dialect)
        self.select_session = CompiledStatement(SELECT_SESSION, dialect)
        self.lock_session = CompiledStatement(SELECT_SESSION_FOR_UPDATE, dialect)
        self.insert_session = CompiledStatement(insert(SESSIONS), dialect, SESSION_COLUMNS)
        self.update_session = CompiledStatement(UPDATE_SESSION, dialect, ("messages", "updated_at"))


def _column_default(column: Column[Any]) -> Any:
    """What the column's default would give a row inserted without it."""
    default = column.default
    if default is None:
        return None
    if default.is_scalar:
        return default.arg  # type: ignore[attr-defined]
    return default.arg(None)  # type: ignore[attr-defined]  # a callable, given no context


def _run_row(record: RunRecord) -> dict[str, Any]:
    """Every column of the run's row: the record's value, else the column default."""
    row: dict[str, Any] = {}
    for column in RUNS.columns:
        value = getattr(record, column.key)
        row[column.key] = _column_default(column) if value is None else value
    return row


def _finish_parameters(record: RunRecord) -> dict[str, Any]:
    return {
        "run_id": record.id,
        **{f"new_{name}": getattr(record, name) for name in FINISHED_COLUMNS},
    }


def _claim(
    cursor: DBAPICursor, writes: _Writes, session_id: str, user_key: str
) -> list[dict[str, Any]] | None:
    """The session's history, the session made the user's if it is nobody's yet; None when it
    is another user's."""
    row = writes.select_session.first(cursor, {"session_id": session_id})
    if row is None:
        writes.insert_session.execute(
            cursor,
            {"id": session_id, "user_key": user_key, "messages": [], "updated_at": utcnow()},
        )
        return []
    owner, messages = row
    return list(messages) if owner == user_key else None


def _append(
    cursor: DBAPICursor,
    writes: _Writes,
    session_id: str,
    user_key: str,
    messages: list[dict[str, Any]],
    limit: int,
) -> bool:
    """Append to the user's own session (made if missing); False for anyone else's."""
    row = writes.lock_session.first(cursor, {"session_id": session_id})
    if row is None:
        writes.insert_session.execute(
            cursor,
            {
                "id": session_id,
                "user_key": user_key,
                "messages": bounded_history(messages, limit),
                "updated_at": utcnow(),
            },
        )
        return True
    owner, stored = row
    if owner != user_key:
        return False
    writes.update_session.execute(
        cursor,
        {
            "session_id": session_id,
            "messages": bounded_history([*stored, *messages], limit),
            "updated_at": utcnow(),
        },
    )
    return True


class SyncRunStore:
    """The run store's statements, made on the calling thread: for the loop's commands (export)
    and for RunStore, which decides where each one runs. Nothing on the event loop calls
    these directly."""

    def __init__(self, url: str) -> None:
        self.engine = create_engine_for(url)
        # Made or brought up to date by its migrations, by one loop at a time (see
        # common.migrations); what this one applied (nothing when another loop had).
        self.migrated = upgrade(self.engine, MIGRATIONS)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        # Writers read then write: take SQLite's write lock up front (see common.sqlite).
        self._write_engine = self.engine.execution_options(sqlite_begin="IMMEDIATE")
        self._writers = sessionmaker(self._write_engine, expire_on_commit=False)
        self._writes = _Writes(self.engine.dialect)
        self._integrity_error = integrity_error(self.engine)
        # SQLite's writer that never waits, for RunStore's writes on the event loop
        self.non_waiting = NonWaitingWriter.for_engine(self.engine)
        self._begin = write_transaction_begin(self.engine)

    def _transaction(self, wait: bool) -> AbstractContextManager[DBAPICursor]:
        if wait or self.non_waiting is None:
            return pooled_transaction(self.engine, self._begin)
        return self.non_waiting.transaction()

    def checkpoint(self) -> None:
        """Copy SQLite's WAL into the database (see NonWaitingWriter.checkpoint)."""
        if self.non_waiting is not None:
            self.non_waiting.checkpoint()

    def _session(self) -> Session:
        return self._sessions()

    def _writer(self) -> Session:
        return self._writers()

    def run_exists(self, run_id: str) -> bool:
        """Whether any user has a run with this id."""
        with self._session() as s:
            return s.get(RunRecord, run_id) is not None

    def recent_runs(self, user_key: str, limit: int) -> list[RunRecord]:
        """The user's newest runs first."""
        query = (
            select(RunRecord)
            .where(RunRecord.user_key == user_key)
            .order_by(RunRecord.created_at.desc())
            .limit(limit)
        )
        with self._session() as s:
            return list(s.scalars(query).all())

    def begin_run(
        self, record: RunRecord, *, claim_session: bool, wait: bool = True
    ) -> list[dict[str, Any]] | None:
        """Store a run as started, in one transaction. With `claim_session` its session becomes
        the run's user's first (see claim_session) and the session's history is returned;
        None, and nothing written, when the session is another user's. (`wait` False:
        raise WriteLockTaken rather than wait for another writer, for this and the other run
        writes; see RunStore._write.)"""
        writes = self._writes
        for attempt in range(2):
            try:
                with self._transaction(wait) as cursor:
                    history: list[dict[str, Any]] = []
                    if claim_session:
                        owned = _claim(cursor, writes, record.session_id, record.user_key)
                        if owned is None:
                            return None
                        history = owned
                    writes.insert_run.execute(cursor, _run_row(record))
                    return history
            except self._integrity_error:  # a concurrent writer created the session first
                # (databases without SQLite's up-front write lock): whoever won owns it
                if not claim_session or attempt == 1:
                    raise
                if self.session_owner(record.session_id) != record.user_key:
                    return None
        raise AssertionError("unreachable")

    def finish_run(
        self,
        record: RunRecord,
        remember: list[dict[str, Any]] | None,
        limit: int,
        *,
        wait: bool = True,
    ) -> bool:
        """Store a finished run and, given `remember` (its messages), append them to its
        session's history, in one transaction. False when the session is another user's: the
        run is stored, the history is not touched."""
        writes = self._writes
        with self._transaction(wait) as cursor:
            if writes.finish_run.execute(cursor, _finish_parameters(record)) == 0:
                # its start was never stored (the store failed then)
                writes.insert_run.execute(cursor, _run_row(record))
            if remember is None:
                return True
            return _append(cursor, writes, record.session_id, record.user_key, remember, limit)

    def get_run(self, run_id: str, user_key: str) -> RunRecord | None:
        with self._session() as s:
            record = s.get(RunRecord, run_id)
            return record if record is not None and record.user_key == user_key else None

    def history(self, session_id: str, user_key: str) -> list[dict[str, Any]]:
        with self._session() as s:
            record = s.get(SessionRecord, session_id)
            if record is None or record.user_key != user_key:
                return []
            return list(record.messages)

    def session_owner(self, session_id: str) -> str | None:
        with self._session() as s:
            record = s.get(SessionRecord, session_id)
            return record.user_key if record else None

    def save_steps(
        self,
        run_id: str,
        steps: list[dict[str, Any]],
        suspended: dict[str, Any] | None = None,
        *,
        wait: bool = True,
    ) -> None:
        """The steps so far of a run that is still running, and what resuming it needs while
        it waits for a confirmation (a late save changes nothing)."""
        with self._transaction(wait) as cursor:
            self._writes.save_steps.execute(
                cursor, {"run_id": run_id, "steps": steps, "suspended": suspended}
            )

    def renew_lease(self, instance_id: str, url: str | None = None) -> None:
        """This loop is alive (and reached at `url`): its runs are its own for another lease."""
        with self._writer() as s, s.begin():
            s.merge(LoopInstance(id=instance_id, renewed_at=utcnow(), url=url))

    def holder_url(
        self, run_id: str, user_key: str, instance_id: str, lease_seconds: float
    ) -> str | None:
        """Where the user's running run is held when another live loop holds it, and that
        loop can be reached; None otherwise."""
        with self._session() as s:
            record = s.get(RunRecord, run_id)
            if (
                record is None
                or record.user_key != user_key
                or record.status != "running"
                or record.owner in (None, instance_id)
            ):
                return None
            holder = s.get(LoopInstance, record.owner)
            alive = utcnow() - dt.timedelta(seconds=lease_seconds)
            if holder is None or holder.renewed_at < alive:
                return None
            return holder.url

    def release_lease(self, instance_id: str) -> None:
        with self._writer() as s, s.begin():
            instance = s.get(LoopInstance, instance_id)
            if instance is not None:
                s.delete(instance)

    def mark_interrupted(
        self, instance_id: str | None = None, lease_seconds: float = 30.0, *, own: bool = True
    ) -> int:
        """Runs left "running" by a process that died: failed, and any tool call that had
        started is named, since it may have been applied. Which: those whose owner stopped
        renewing its lease for `lease_seconds`, and with `own` (a loop starting) those this
        loop owned before it restarted and those of no owner (an older loop's); another live
        loop's runs are its own. (`instance_id` None: every running run, whoever owns it.)"""
        return self._sweep(instance_id, lease_seconds, own=own, take_waiting=False)[0]

    def take_over(
        self, instance_id: str, lease_seconds: float = 30.0, *, own: bool = True
    ) -> tuple[int, list[RunRecord]]:
        """As mark_interrupted, except for the runs that were waiting for a person's
        confirmation which has not expired: those become `instance_id`'s, still running, and
        are returned (with `suspended`) for it to go on with once the person answers."""
        return self._sweep(instance_id, lease_seconds, own=own, take_waiting=True)

    def _sweep(
        self, instance_id: str | None, lease_seconds: float, *, own: bool, take_waiting: bool
    ) -> tuple[int, list[RunRecord]]:
        now = utcnow()
        expired = now - dt.timedelta(seconds=lease_seconds)
        live = select(LoopInstance.id).where(LoopInstance.renewed_at >= expired)
        taken: list[RunRecord] = []
        with self._writer() as s, s.begin():
            query = select(RunRecord).where(RunRecord.status == "running")
            if instance_id is not None:
                lapsed = RunRecord.owner.not_in(live)
                if own:
                    query = query.where(
                        lapsed | (RunRecord.owner == instance_id) | RunRecord.owner.is_(None)
                    )
                else:
                    query = query.where(lapsed)
            stale = s.scalars(query.with_for_update()).all()
            for record in stale:
                if take_waiting and _still_waiting(record.suspended, now):
                    record.owner = instance_id
                    taken.append(record)
                    continue
                _mark_interrupted(record)
        return len(stale) - len(taken), taken

    def finished_runs(
        self,
        *,
        status: str | None = None,
        without_tool_errors: bool = False,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
    ) -> Iterator[RunRecord]:
        query = select(RunRecord).where(RunRecord.finished_at.is_not(None))
        if status:
            query = query.where(RunRecord.status == status)
        if without_tool_errors:
            query = query.where(RunRecord.tool_errors == 0)
        if since:
            query = query.where(RunRecord.created_at >= since)
        if until:
            query = query.where(RunRecord.created_at < until)
        with self._session() as s:
            yield from s.scalars(query.order_by(RunRecord.created_at)).all()

    def dispose(self) -> None:
        if self.non_waiting is not None:
            self.non_waiting.close()
        self.engine.dispose()


class RunStore:
    """The run store as the event loop uses it: every method is a coroutine that decides
    itself where its statements run, so no caller hands a store call to a thread. The run
    writes (begin_run, save_steps, finish_run) go through one writer queue (see _write); the
    reads and the lease's writes, which may wait for the database, run on a worker thread.
    `sync` is the same store called on the caller's own thread (commands, tests)."""

    def __init__(self, url: str) -> None:
        self.sync = SyncRunStore(url)
        self.engine = self.sync.engine
        self.migrated = self.sync.migrated
        log_upgrade(MIGRATIONS, self.migrated)
        # Writes that may wait for the database (every write on PostgreSQL; on SQLite, one that
        # finds another process writing) are made one at a time, on a thread of their own: a
        # write waiting in its queue starts the moment the one before it ends, while writers
        # racing for SQLite's lock sleep in its busy handler (1 to 100 ms a try) and the runs
        # behind them wait that long; and one plain executor thread costs less CPU to hand
        # work to than anyio's worker threads.
        self._write_thread = ThreadPoolExecutor(1, thread_name_prefix="run-store")
        self._checkpointing: asyncio.Future[None] | None = None

    async def _write(self, write: Callable[..., T]) -> T:
        """One of the run writes (a SyncRunStore write as a partial), from the event loop. On
        SQLite it is made here and now (no thread to hand it to and back, which cost as much
        CPU as the write: there `wait=False` makes it raise WriteLockTaken, having written
        nothing, rather than wait for another writer), after the checkpoint under way if there
        is one; only when another process holds the lock does it queue on the writer thread.
        Elsewhere every write queues on the writer thread."""
        non_waiting = self.sync.non_waiting
        if non_waiting is not None:
            # Held back until the checkpoint is done, so that it finds the WAL wholly copied
            # and the next write starts the file afresh. Waited for here, not queued behind it
            # on the thread: each write handed over cost about a millisecond there, and while
            # they drained the next writes found the lock taken and queued too (15 % of all
            # writes at concurrency 8).
            while self._checkpointing is not None and not self._checkpointing.done():
                await asyncio.wait({self._checkpointing})  # never cancels the checkpoint
            try:
                result = write(wait=False)
            except WriteLockTaken:
                pass  # another process is writing: wait for it on the writer thread
            else:
                if non_waiting.checkpoint_due():
                    self._checkpointing = asyncio.get_running_loop().run_in_executor(
                        self._write_thread, self._checkpoint_quietly
                    )
                return result
        return await asyncio.get_running_loop().run_in_executor(self._write_thread, write)

    @staticmethod
    async def _read(read: Callable[[], T]) -> T:
        """A read (or a lease write), on a worker thread: it may wait for the database."""
        return await anyio.to_thread.run_sync(read)

    def _checkpoint_quietly(self) -> None:
        try:
            self.checkpoint()
        except Exception as error:  # the next one will do; the WAL only grows meanwhile
            logger.warning("run store checkpoint failed: %s", error)

    def checkpoint(self) -> None:
        self.sync.checkpoint()

    def finish_writes(self) -> None:
        """Wait for the writes already handed to the writer thread; it takes no more."""
        self._write_thread.shutdown(wait=True)

    async def begin_run(
        self, record: RunRecord, *, claim_session: bool
    ) -> list[dict[str, Any]] | None:
        """See SyncRunStore.begin_run."""
        return await self._write(partial(self.sync.begin_run, record, claim_session=claim_session))

    async def finish_run(
        self, record: RunRecord, remember: list[dict[str, Any]] | None, limit: int
    ) -> bool:
        """See SyncRunStore.finish_run."""
        return await self._write(partial(self.sync.finish_run, record, remember, limit))

    async def save_steps(
        self, run_id: str, steps: list[dict[str, Any]], suspended: dict[str, Any] | None = None
    ) -> None:
        """See SyncRunStore.save_steps."""
        await self._write(partial(self.sync.save_steps, run_id, steps, suspended))

    async def run_exists(self, run_id: str) -> bool:
        return await self._read(partial(self.sync.run_exists, run_id))

    async def get_run(self, run_id: str, user_key: str) -> RunRecord | None:
        return await self._read(partial(self.sync.get_run, run_id, user_key))

    async def recent_runs(self, user_key: str, limit: int) -> list[RunRecord]:
        return await self._read(partial(self.sync.recent_runs, user_key, limit))

    async def history(self, session_id: str, user_key: str) -> list[dict[str, Any]]:
        return await self._read(partial(self.sync.history, session_id, user_key))

    async def session_owner(self, session_id: str) -> str | None:
        return await self._read(partial(self.sync.session_owner, session_id))

    async def renew_lease(self, instance_id: str, url: str | None = None) -> None:
        await self._read(partial(self.sync.renew_lease, instance_id, url))

    async def holder_url(
        self, run_id: str, user_key: str, instance_id: str, lease_seconds: float
    ) -> str | None:
        """See SyncRunStore.holder_url."""
        return await self._read(
            partial(self.sync.holder_url, run_id, user_key, instance_id, lease_seconds)
        )

    async def release_lease(self, instance_id: str) -> None:
        await self._read(partial(self.sync.release_lease, instance_id))

    async def take_over(
        self, instance_id: str, lease_seconds: float = 30.0, *, own: bool = True
    ) -> tuple[int, list[RunRecord]]:
        """See SyncRunStore.take_over."""
        return await self._read(partial(self.sync.take_over, instance_id, lease_seconds, own=own))

    def dispose(self) -> None:
        self.finish_writes()
        self.sync.dispose()
