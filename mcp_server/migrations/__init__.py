"""The leave database's schema history (Alembic revisions in versions/, run by
common.migrations)."""

from __future__ import annotations

from pathlib import Path

from common.migrations import Migrations

MIGRATIONS = Migrations(
    what="the leave database",
    folder=Path(__file__).parent,
    version_table="leave_schema_version",
    lock_key=0x1EA7E,  # the key the server's schema creation locked before migrations
)
