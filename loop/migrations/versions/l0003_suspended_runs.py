"""A run waiting for a confirmation keeps what resuming it needs (00a49c7).

Revision ID: l0003
Revises: l0002
"""

from __future__ import annotations

from sqlalchemy import JSON, Column

from common.migrations import add_column

revision = "l0003"
down_revision = "l0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_column("runs", Column("suspended", JSON(none_as_null=True)))
