"""Front ends acting for people (issue 33): an employee's email, which a front end names them
by; a token that is a front end's credential (no employee of its own); the front end in the
audit log and on each open question.

`api_tokens.employee_id` becomes nullable: on SQLite through Alembic's batch mode, which copies
the table (its rows, keys and indexes) into one made anew.

Revision ID: m0004
Revises: m0003
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import Column, String, inspect

from common.migrations import add_column

revision = "m0004"
down_revision = "m0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_column("employees", Column("email", String(254)), index=True, unique=True)
    add_column("api_tokens", Column("front_end", String(64)))
    employee = next(
        c for c in inspect(op.get_bind()).get_columns("api_tokens") if c["name"] == "employee_id"
    )
    if not employee["nullable"]:
        with op.batch_alter_table("api_tokens") as table:
            table.alter_column("employee_id", existing_type=String(32), nullable=True)
    for name in ("audit_log", "pending_confirmations"):
        add_column(name, Column("front_end", String(64)))
        add_column(name, Column("front_end_token_id", String(24)))
