"""The run store's schema history (Alembic revisions in versions/, run by common.migrations)."""

from __future__ import annotations

from pathlib import Path

from common.migrations import Migrations

MIGRATIONS = Migrations(
    what="the run store",
    folder=Path(__file__).parent,
    version_table="loop_schema_version",
    lock_key=0x100B5,
)
