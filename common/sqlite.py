"""SQLAlchemy engines; what is SQLite-specific lives here and nowhere else. Other URLs
(PostgreSQL through psycopg 3, which the services install) get a plain engine."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine, make_url


def create_engine_for(url: str) -> Engine:
    """An engine for `url`. SQLite gets WAL, a busy timeout, foreign keys, and transactions that
    begin with the execution option `sqlite_begin` (e.g. "IMMEDIATE" for writers)."""
    parsed = make_url(url)
    # Error messages leave out statement parameters: they are user input and may be huge.
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, hide_parameters=True)

    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url, connect_args={"check_same_thread": False, "timeout": 30}, hide_parameters=True
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
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
    def _on_begin(connection: Connection) -> None:
        # Writers take the write lock up front so concurrent writers queue instead of failing.
        mode = connection.get_execution_options().get("sqlite_begin", "")
        connection.exec_driver_sql(f"BEGIN {mode}".strip())

    return engine


def utcnow() -> dt.datetime:
    """Timezone-aware now, for timestamp columns."""
    return dt.datetime.now(dt.UTC)
