"""Tables and engine of the leave database.

Everything that knows it talks to SQLite lives in `create_engine_for`; the rest is portable
SQLAlchemy 2, so a PostgreSQL URL works without code changes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import (
    Date,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    create_engine,
    event,
    text,
)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker


class Base(DeclarativeBase):
    pass


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Employee(Base):
    __tablename__ = "employees"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    manager_id: Mapped[str | None] = mapped_column(ForeignKey("employees.id"), index=True)


class ApiToken(Base):
    __tablename__ = "api_tokens"

    # SHA-256 of the bearer token: a leaked database does not leak usable tokens.
    token_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    employee_id: Mapped[str] = mapped_column(ForeignKey("employees.id"), index=True)
    is_demo: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Leave(Base):
    __tablename__ = "leaves"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    employee_id: Mapped[str] = mapped_column(ForeignKey("employees.id"), index=True)
    leave_type: Mapped[str] = mapped_column(String(16))
    start_date: Mapped[dt.date] = mapped_column(Date)
    end_date: Mapped[dt.date] = mapped_column(Date)
    days: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16), index=True)
    reason: Mapped[str] = mapped_column(String(500))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


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
    at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    tool: Mapped[str] = mapped_column(String(64))
    from_status: Mapped[str | None] = mapped_column(String(16))
    to_status: Mapped[str | None] = mapped_column(String(16))
    # accepted | declined | cancelled, for actions behind a human confirmation; else NULL
    confirmation: Mapped[str | None] = mapped_column(String(16))
    # applied | not_applied
    outcome: Mapped[str] = mapped_column(String(16))


def create_engine_for(url: str) -> Engine:
    """An engine for `url`; SQLite gets WAL, a busy timeout and write-locking transactions."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)

    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        # Let SQLAlchemy emit BEGIN itself (the pysqlite driver's implicit BEGIN is deferred,
        # and a deferred reader that later writes fails with SQLITE_BUSY instead of waiting).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        # In WAL mode NORMAL stays consistent after any crash and skips an fsync per commit;
        # a power cut can lose the last commits. Use PostgreSQL where that matters.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection) -> None:  # type: ignore[no-untyped-def]
        # Writers take the write lock up front so concurrent writers queue instead of failing.
        mode = connection.get_execution_options().get("sqlite_begin", "")
        connection.exec_driver_sql(f"BEGIN {mode}".strip())

    return engine


class Database:
    """Owns the engine and hands out read and write transactions."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = create_engine_for(url)
        self._reader = sessionmaker(self.engine, expire_on_commit=False)
        self._writer = sessionmaker(
            self.engine.execution_options(sqlite_begin="IMMEDIATE"), expire_on_commit=False
        )

    def create_schema(self) -> None:
        Base.metadata.create_all(self.engine)

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self._reader() as session, session.begin():
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """One transaction: committed on success, rolled back on any exception."""
        with self._writer() as session, session.begin():
            yield session

    def ping(self) -> None:
        with self.engine.connect() as connection:
            connection.execute(text("SELECT 1"))

    def dispose(self) -> None:
        self.engine.dispose()
