"""Loops on one store tell each other apart: a run's owner, each loop's lease (159ed22).

Runs an older loop stored keep no owner (NULL): a loop starting takes them for its own.

Revision ID: l0002
Revises: l0001
"""

from __future__ import annotations

from sqlalchemy import Column, DateTime, String

from common.migrations import add_column, create_table

revision = "l0002"
down_revision = "l0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_table(
        "loop_instances",
        Column("id", String(128), primary_key=True),
        Column("renewed_at", DateTime(timezone=True), nullable=False),
    )
    add_column("runs", Column("owner", String(128)), index=True)
