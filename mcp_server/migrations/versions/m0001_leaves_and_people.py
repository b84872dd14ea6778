"""The leave database as the first MCP server made it (2e729c9).

Revision ID: m0001
Revises:
"""

from __future__ import annotations

from sqlalchemy import Boolean, Column, Date, DateTime, Float, ForeignKey, Integer, String

from common.migrations import create_table

revision = "m0001"
down_revision: str | None = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_table(
        "employees",
        Column("id", String(32), primary_key=True),
        Column("name", String(100), nullable=False),
        Column("manager_id", String(32), ForeignKey("employees.id")),
        indexed=("manager_id",),
    )
    create_table(
        "api_tokens",
        Column("token_sha256", String(64), primary_key=True),
        Column("employee_id", String(32), ForeignKey("employees.id"), nullable=False),
        Column("is_demo", Boolean, nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False),
        indexed=("employee_id",),
    )
    create_table(
        "leaves",
        Column("id", String(16), primary_key=True),
        Column("employee_id", String(32), ForeignKey("employees.id"), nullable=False),
        Column("leave_type", String(16), nullable=False),
        Column("start_date", Date, nullable=False),
        Column("end_date", Date, nullable=False),
        Column("days", Float, nullable=False),
        Column("status", String(16), nullable=False),
        Column("reason", String(500), nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False),
        Column("updated_at", DateTime(timezone=True), nullable=False),
        indexed=("employee_id", "status"),
    )
    create_table(
        "balances",
        Column("employee_id", String(32), ForeignKey("employees.id"), primary_key=True),
        Column("leave_type", String(16), primary_key=True),
        Column("remaining_days", Float, nullable=False),
    )
    create_table(
        "audit_log",
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("leave_id", String(16), nullable=False),
        Column("actor_id", String(32), nullable=False),
        Column("at", DateTime(timezone=True), nullable=False),
        Column("tool", String(64), nullable=False),
        Column("from_status", String(16)),
        Column("to_status", String(16)),
        Column("confirmation", String(16)),
        Column("outcome", String(16), nullable=False),
        indexed=("leave_id",),
    )
