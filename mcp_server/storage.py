"""Tables and engine of the leave database.

Everything that knows it talks to SQLite lives in `common.sqlite`; the rest is portable
SQLAlchemy 2, so a PostgreSQL URL (psycopg 3) works without code changes: the reliability tier
runs the server's whole test suite on PostgreSQL. Where PostgreSQL's interleaving writers need
row locks that SQLite's queued writers do not, `leaves` takes them.
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import TypeVar

import anyio.to_thread
from sqlalchemy import Date, Dialect, Float, ForeignKey, Integer, String, text
from sqlalchemy.engine.interfaces import DBAPICursor
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker
from sqlalchemy.types import TypeDecorator

from common.dbapi import pooled_cursor
from common.migrations import upgrade
from common.schema import UtcDateTime
from common.sqlite import create_engine_for, is_sqlite_file, utcnow

from .migrations import MIGRATIONS

T = TypeVar("T")
# Set while AsyncStore._read runs its work in place: the reads inside take its connection.
_reading_in_place: ContextVar[bool] = ContextVar("reading_in_place", default=False)


class Base(DeclarativeBase):
    pass


class PlainString(TypeDecorator[str]):
    """A string column that stores a `StrEnum` member (a status, a tool name) as its value:
    left to the driver, an Enum member may be written as its name instead."""

    impl = String
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else str(value)


class Employee(Base):
    __tablename__ = "employees"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    manager_id: Mapped[str | None] = mapped_column(ForeignKey("employees.id"), index=True)
    # False: left the company; their tokens and sign-ins stop working, their history stays.
    # (None: a row an older version wrote, when everyone was active.)
    active: Mapped[bool | None] = mapped_column(default=True)
    # "demo" (the seed step) or "import" (the company's own file)
    source: Mapped[str | None] = mapped_column(String(16))
    # The address a front end names the person by when it acts for them (identity.py), in
    # lower case: unique, compared without regard to case. None: no front end can act for them.
    email: Mapped[str | None] = mapped_column(String(254), index=True, unique=True)

    @property
    def is_active(self) -> bool:
        return self.active is not False


class ApiToken(Base):
    __tablename__ = "api_tokens"

    # SHA-256 of the bearer token: a leaked database does not leak usable tokens.
    token_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    # The employee the token lets in; None for a front end's credential (`front_end`).
    employee_id: Mapped[str | None] = mapped_column(ForeignKey("employees.id"), index=True)
    is_demo: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    # What list-tokens and revoke-token name a token by: never the secret, nor its hash.
    public_id: Mapped[str | None] = mapped_column(String(24), index=True, unique=True)
    label: Mapped[str | None] = mapped_column(String(100))
    expires_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime)
    last_used_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime)
    # Set: the credential of this front end (a chat front end's name), which names no employee
    # and acts only for the person it forwards with each request (identity.py).
    front_end: Mapped[str | None] = mapped_column(String(64))


class Leave(Base):
    __tablename__ = "leaves"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    employee_id: Mapped[str] = mapped_column(ForeignKey("employees.id"), index=True)
    leave_type: Mapped[str] = mapped_column(String(16))
    start_date: Mapped[dt.date] = mapped_column(Date)
    end_date: Mapped[dt.date] = mapped_column(Date)
    days: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(PlainString(16), index=True)
    reason: Mapped[str] = mapped_column(String(500))
    created_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)


class Balance(Base):
    __tablename__ = "balances"

    employee_id: Mapped[str] = mapped_column(ForeignKey("employees.id"), primary_key=True)
    leave_type: Mapped[str] = mapped_column(String(16), primary_key=True)
    remaining_days: Mapped[float] = mapped_column(Float)


class AuditEntry(Base):
    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    leave_id: Mapped[str] = mapped_column(String(16), index=True)
    actor_id: Mapped[str] = mapped_column(String(32))
    at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    tool: Mapped[str] = mapped_column(PlainString(64))
    from_status: Mapped[str | None] = mapped_column(PlainString(16))
    to_status: Mapped[str | None] = mapped_column(PlainString(16))
    # accepted | declined | cancelled | abandoned (asked, never answered), for actions behind a
    # human confirmation; else NULL
    confirmation: Mapped[str | None] = mapped_column(String(16))
    # applied | not_applied
    outcome: Mapped[str] = mapped_column(String(16))
    # The front end that acted for the actor, and its credential's id; NULL: the actor's own
    # token or sign-in.
    front_end: Mapped[str | None] = mapped_column(String(64))
    front_end_token_id: Mapped[str | None] = mapped_column(String(24))


class PendingConfirmation(Base):
    """A confirmation that was asked and not yet answered. In the stateless protocol era the
    server keeps nothing else between the question and the answer, so this row is what lets
    an abandoned one (client cancelled or crashed) still reach the audit log."""

    __tablename__ = "pending_confirmations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    leave_id: Mapped[str] = mapped_column(String(16), index=True)
    actor_id: Mapped[str] = mapped_column(String(32))
    tool: Mapped[str] = mapped_column(PlainString(64))
    asked_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow, index=True)
    # as AuditEntry's: the abandoned question's audit entry names them too
    front_end: Mapped[str | None] = mapped_column(String(64))
    front_end_token_id: Mapped[str | None] = mapped_column(String(24))


class Database:
    """Owns the engine and hands out read and write transactions, on the calling thread (the
    serving process reaches it through the stores' async faces: see AsyncStore)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = create_engine_for(url)
        # A SQLite file's readers never wait (WAL: a writer does not block them), and such a
        # read costs less than handing it to a worker thread and back: the server makes its
        # reads in place there, and on a worker thread where the database is across a network
        # (PostgreSQL). In place, on a connection of the thread's own: the pool's may all be
        # held by writers queued for the write lock, and waiting for one would stall every
        # request the event loop serves.
        self.reads_in_place = is_sqlite_file(url)
        self._in_place = (
            create_engine_for(url, connection_per_thread=True) if self.reads_in_place else None
        )
        self._in_place_reader = sessionmaker(self._in_place, expire_on_commit=False)
        self._reader = sessionmaker(self.engine, expire_on_commit=False)
        self._writer = sessionmaker(
            self.engine.execution_options(sqlite_begin="IMMEDIATE"), expire_on_commit=False
        )

    def create_schema(self) -> list[str]:
        """Create the schema, or bring it up to date, with its migrations; the revisions this
        call applied. Replicas may start together on an empty database: one migrates while
        the others wait (see common.migrations), then find nothing to do."""
        return upgrade(self.engine, MIGRATIONS)

    def drop_schema(self) -> None:
        """Drop every table, the migrations' version with them (seed --reset)."""
        with self.engine.begin() as connection:
            Base.metadata.drop_all(connection)
            connection.execute(text(f"DROP TABLE IF EXISTS {MIGRATIONS.version_table}"))

    @contextmanager
    def read(self) -> Iterator[Session]:
        reader = self._in_place_reader if _reading_in_place.get() else self._reader
        with reader() as session, session.begin():
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """One transaction: committed on success, rolled back on any exception."""
        with self._writer() as session, session.begin():
            yield session

    def cursor(self) -> AbstractContextManager[DBAPICursor]:
        """A driver cursor for a single read statement (see common.dbapi)."""
        in_place = self._in_place if _reading_in_place.get() else None
        return pooled_cursor(self.engine if in_place is None else in_place)

    def ping(self) -> None:
        with self.engine.connect() as connection:
            connection.execute(text("SELECT 1"))

    def dispose(self) -> None:
        self.engine.dispose()
        if self._in_place is not None:
            self._in_place.dispose()


class AsyncStore:
    """The base of a store's async face (LeaveStore, IdentityStore): the one place that decides
    where a store call runs, so that nothing on the event loop hands a store call to a thread
    itself. Each face's public methods are coroutines that choose, as the server always has:
    the hot reads (a search, a balance, a token) in place where they never wait (a SQLite
    file: see Database.reads_in_place), on a worker thread elsewhere; everything else (every
    write, which may wait for the write lock or a row lock, and the other reads) on a worker
    thread.

    A face wraps the sync store rather than replacing its methods: the operator commands, the
    seed step, the load generator and the tests call the stores on their own thread, and keep
    calling the sync class (`sync` on a face), as the loop's RunStore keeps its SyncRunStore.
    The face holds nothing but the store it wraps, and looks each method up on it per call."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def _read(self, work: Callable[[], T]) -> T:
        """`work`, which only reads: in place on a SQLite file, on this thread's own
        connection (see Database.reads_in_place), else on a worker thread."""
        db = self._db
        if not db.reads_in_place or db._in_place is None:
            return await anyio.to_thread.run_sync(work)
        reset = _reading_in_place.set(True)
        try:
            return work()
        finally:
            _reading_in_place.reset(reset)

    @staticmethod
    async def _on_thread(work: Callable[[], T]) -> T:
        """`work`, which may wait for the database, on a worker thread."""
        return await anyio.to_thread.run_sync(work)


def new_token_id() -> str:
    return f"tok_{secrets.token_hex(6)}"
