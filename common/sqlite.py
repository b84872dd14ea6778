"""SQLAlchemy engines; what is SQLite-specific lives here and nowhere else. Other URLs
(PostgreSQL through psycopg 3, which the services install) get a plain engine."""

from __future__ import annotations

import datetime as dt
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.engine.interfaces import DBAPICursor
from sqlalchemy.pool import SingletonThreadPool

from .dbapi import transaction

# As long as the busy timeout every connection gets (PRAGMA busy_timeout below).
WAL_SWITCH_WAIT_SECONDS = 30.0


def is_sqlite_file(url: str) -> bool:
    parsed = make_url(url)
    return parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:")


def create_engine_for(url: str, *, connection_per_thread: bool = False) -> Engine:
    """An engine for `url`. SQLite gets WAL, a busy timeout, foreign keys, and transactions that
    begin with the execution option `sqlite_begin` (e.g. "IMMEDIATE" for writers); with
    `connection_per_thread`, each thread its own connection instead of a shared pool."""
    parsed = make_url(url)
    # Error messages leave out statement parameters: they are user input and may be huge.
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, hide_parameters=True)

    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": 30},
        hide_parameters=True,
        **({"poolclass": SingletonThreadPool} if connection_per_thread else {}),
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy emit BEGIN itself (the pysqlite driver's implicit BEGIN is deferred,
        # and a deferred reader that later writes fails with SQLITE_BUSY instead of waiting).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        _enable_wal(cursor)
        # In WAL mode NORMAL stays consistent after any crash and skips an fsync per commit;
        # a power cut can lose the last commits. Use PostgreSQL where that matters.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        # Writers take the write lock up front so concurrent writers queue instead of failing.
        mode = connection.get_execution_options().get("sqlite_begin", "")
        connection.exec_driver_sql(f"BEGIN {mode}".strip())

    return engine


def _enable_wal(cursor: Any) -> None:
    """`PRAGMA journal_mode=WAL`, waiting for a writer that holds the file: SQLite answers this
    pragma "database is locked" at once, without its busy handler, while another connection
    writes a database still in rollback mode (replicas creating a fresh schema together)."""
    deadline = time.monotonic() + WAL_SWITCH_WAIT_SECONDS
    pause = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() >= deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.1)


def write_transaction_begin(engine: Engine) -> str | None:
    """What opens a writing transaction on one of the engine's DBAPI connections: SQLite's are
    left in autocommit mode (see above), so a writer begins IMMEDIATE itself; other drivers
    begin on their first statement."""
    return "BEGIN IMMEDIATE" if engine.dialect.name == "sqlite" else None


class WriteLockTaken(Exception):
    """Another connection holds the database's write lock: nothing was written."""


class NonWaitingWriter:
    """Writes to a SQLite database that never wait, for an event loop to make on its own
    thread: a run's two writes cost about 0.45 ms of CPU made there, and 0.95 ms handed to a
    thread and back (measured side by side, 1000 runs each way). A connection of its own,
    whose transactions raise WriteLockTaken at once when another connection is writing (the
    caller then waits elsewhere), and which never checkpoints the WAL, since a checkpoint
    syncs the disk: `checkpoint_due` says when to checkpoint (`checkpoint`) off the loop."""

    CHECKPOINT_EVERY = 100  # commits: a run's writes put about 40 KB of pages in the WAL each

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        connection = engine.raw_connection()
        connection.detach()  # this one's settings are its own; the pool never sees it again
        cursor = connection.cursor()
        cursor.execute("PRAGMA busy_timeout=0")
        cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.close()
        self._connection = connection
        self._commits = 0

    @staticmethod
    def for_engine(engine: Engine) -> NonWaitingWriter | None:
        """One for a SQLite file; None for other databases (they are written off the loop) and
        for an in-memory one (a connection of its own would be a database of its own)."""
        in_file = engine.url.database not in (None, "", ":memory:")
        return NonWaitingWriter(engine) if engine.dialect.name == "sqlite" and in_file else None

    @contextmanager
    def transaction(self) -> Iterator[DBAPICursor]:
        try:
            with transaction(self._connection, "BEGIN IMMEDIATE") as cursor:
                yield cursor
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode == sqlite3.SQLITE_BUSY:
                raise WriteLockTaken() from None
            raise
        self._commits += 1

    def checkpoint_due(self) -> bool:
        """True once per CHECKPOINT_EVERY commits."""
        if self._commits < self.CHECKPOINT_EVERY:
            return False
        self._commits = 0
        return True

    def checkpoint(self) -> None:
        """Copy the WAL into the database, so that the next write starts it afresh. Call it off
        the loop, with the caller's own writes held back until it is done: checkpoints made
        beside a steady stream of writes never find the WAL wholly copied when a write begins,
        and it only grows. (Passive: it waits for nobody; another process's readers on an
        older snapshot keep their part of the WAL until the next one.)"""
        with self._engine.connect() as connection:
            connection.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")

    def close(self) -> None:
        self._connection.close()


def utcnow() -> dt.datetime:
    """Timezone-aware now, for timestamp columns."""
    return dt.datetime.now(dt.UTC)
