"""Schema migrations (Alembic) for the services' databases, run at start under a lock.

Each database has its own history (`loop/migrations`, `mcp_server/migrations`) and its own
version table, so both may even share one PostgreSQL database. Replicas starting together on
one database take turns: the first one in applies what is missing while the others wait for
its lock (a PostgreSQL advisory lock held by the migration's transaction; SQLite's write lock,
taken up front with BEGIN IMMEDIATE), then find the database at the newest revision and apply
nothing. PostgreSQL and SQLite run DDL inside a transaction, so a migration that fails leaves
the database as it was.

The revisions that reproduce the schemas shipped before migrations existed add only what a
database lacks: such a database has no version table, and may have gained some of the later
columns from the older versions' `add_missing_columns`, so it is upgraded from the first
revision and each step skips what is already there.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import op
from alembic.config import Config
from alembic.migration import MigrationContext, MigrationInfo
from alembic.runtime.environment import EnvironmentContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, inspect, text
from sqlalchemy.engine import Connection, Engine

logger = logging.getLogger(__name__)
# Alembic says which implementation it picked each time a context opens: noise in a service's
# log (and in a command's output); what was applied is logged here instead.
logging.getLogger("alembic.runtime.migration").setLevel(logging.WARNING)


@dataclass(frozen=True)
class Migrations:
    """One database's history."""

    what: str  # how messages name the database: "the run store"
    folder: Path  # holds versions/
    version_table: str
    # Any number the servers sharing a database agree on: it names the lock around upgrading.
    lock_key: int

    def script(self) -> ScriptDirectory:
        return ScriptDirectory(str(self.folder))

    @property
    def head(self) -> str:
        head = self.script().get_current_head()
        assert head is not None, f"{self.folder} has no revisions"
        return head


def current_revision(engine: Engine, migrations: Migrations) -> str | None:
    """The revision the database is at; None for an empty one or one made before migrations."""
    with engine.connect() as connection:
        return _context(connection, migrations).get_current_revision()


def pending(engine: Engine, migrations: Migrations) -> list[str]:
    """The revisions the next start would apply, oldest first."""
    current = current_revision(engine, migrations)
    script = migrations.script()
    revisions = [r.revision for r in script.iterate_revisions("head", current)]
    return list(reversed(revisions))


def describe(engine: Engine, migrations: Migrations) -> str:
    """One line for an operator: the revision the database is at, and what a start would
    apply (the schema commands print it; nothing is changed)."""
    current = current_revision(engine, migrations)
    to_apply = pending(engine, migrations)
    if current is None:
        state = "no schema version (empty, or made before migrations)"
    else:
        state = f"schema at {current}"
    if not to_apply:
        return f"{migrations.what}: {state} (newest)"
    return f"{migrations.what}: {state}; the next start applies {', '.join(to_apply)}"


def upgrade(engine: Engine, migrations: Migrations) -> list[str]:
    """Bring the database to the newest revision under the lock (see the module); the revisions
    this call applied, oldest first (none when another replica had done it)."""
    applied: list[str] = []

    def record(ctx: MigrationContext, step: MigrationInfo, heads: Any, run_args: Any) -> None:
        applied.extend(step.up_revision_ids)

    script = migrations.script()
    with engine.execution_options(sqlite_begin="IMMEDIATE").begin() as connection:
        if connection.dialect.name == "postgresql":
            # released when the transaction ends: the others then read the new version
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": migrations.lock_key}
            )
        environment = EnvironmentContext(
            Config(),
            script,
            fn=lambda revision, _context: script._upgrade_revs("head", revision),
        )
        with environment:
            environment.configure(
                connection=connection,
                version_table=migrations.version_table,
                transactional_ddl=True,
                on_version_apply=record,
            )
            environment.run_migrations()
    return applied


def log_upgrade(migrations: Migrations, applied: list[str]) -> None:
    """Say in a serving process's log what its start applied (commands print their own). At
    debug level: a service that fails to start says so in one line, and the schema commands
    show the revision."""
    if applied:
        logger.debug("%s: schema upgraded to %s (%s)", migrations.what, applied[-1], applied)


def compare(connection: Connection, migrations: Migrations, metadata: Any) -> list[Any]:
    """How the database's schema differs from `metadata` (Alembic's autogenerate diff): empty
    when the migrations made what the models declare."""
    from alembic.autogenerate import compare_metadata

    return list(compare_metadata(_context(connection, migrations), metadata))


def _context(connection: Connection, migrations: Migrations) -> MigrationContext:
    return MigrationContext.configure(connection, opts={"version_table": migrations.version_table})


# Steps for the revisions that replay the shipped schemas: each does only what is missing.


def create_table(name: str, *columns: Column[Any], indexed: Sequence[str] = ()) -> bool:
    """Create the table, and an index ix_<table>_<column> of each `indexed` column (as the
    models name them), unless it exists; True when created."""
    if name in set(inspect(op.get_bind()).get_table_names()):
        return False
    op.create_table(name, *columns)
    for column in indexed:
        op.create_index(f"ix_{name}_{column}", name, [column])
    return True


def add_column(
    table: str, column: Column[Any], *, index: bool = False, unique: bool = False
) -> bool:
    """Add the column unless the table has it (and its index ix_<table>_<column>, as the
    models name it); True when added."""
    present = {c["name"] for c in inspect(op.get_bind()).get_columns(table)}
    if column.name in present:
        return False
    op.add_column(table, column)
    if index:
        op.create_index(f"ix_{table}_{column.name}", table, [column.name], unique=unique)
    return True
