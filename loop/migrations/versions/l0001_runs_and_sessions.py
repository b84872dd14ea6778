"""Runs and sessions: the run store as the first loop made it (539f1c8).

Revision ID: l0001
Revises:
"""

from __future__ import annotations

from sqlalchemy import JSON, Column, DateTime, Integer, String, Text

from common.migrations import create_table

revision = "l0001"
down_revision: str | None = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_table(
        "runs",
        Column("id", String(40), primary_key=True),
        Column("user_key", String(64), nullable=False),
        Column("session_id", String(64), nullable=False),
        Column("status", String(16), nullable=False),
        Column("input", Text, nullable=False),
        Column("answer", Text, nullable=False),
        Column("reason", String(500)),
        Column("result", JSON),
        Column("steps", JSON, nullable=False),
        Column("messages", JSON, nullable=False),
        Column("tools", JSON, nullable=False),
        Column("system_prompt", Text, nullable=False),
        Column("history", JSON, nullable=False),
        Column("prompt_tokens", Integer, nullable=False),
        Column("completion_tokens", Integer, nullable=False),
        Column("turns", Integer, nullable=False),
        Column("tool_errors", Integer, nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False),
        Column("finished_at", DateTime(timezone=True)),
        indexed=("user_key", "session_id", "status", "created_at"),
    )
    create_table(
        "sessions",
        Column("id", String(64), primary_key=True),
        Column("user_key", String(64), nullable=False),
        Column("messages", JSON, nullable=False),
        Column("updated_at", DateTime(timezone=True), nullable=False),
        indexed=("user_key",),
    )
