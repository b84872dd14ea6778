"""A loop's lease names where the other loops reach it, so that a request about a run it
holds can be sent on to it.

Revision ID: l0004
Revises: l0003
"""

from __future__ import annotations

from sqlalchemy import Column, String

from common.migrations import add_column

revision = "l0004"
down_revision = "l0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_column("loop_instances", Column("url", String(512)))
