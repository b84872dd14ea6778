"""Confirmations asked and not yet answered, so abandoned ones reach the audit log (1ea28f1).

Revision ID: m0002
Revises: m0001
"""

from __future__ import annotations

from sqlalchemy import Column, DateTime, Integer, String

from common.migrations import create_table

revision = "m0002"
down_revision = "m0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_table(
        "pending_confirmations",
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("leave_id", String(16), nullable=False),
        Column("actor_id", String(32), nullable=False),
        Column("tool", String(64), nullable=False),
        Column("asked_at", DateTime(timezone=True), nullable=False),
        indexed=("leave_id", "asked_at"),
    )
