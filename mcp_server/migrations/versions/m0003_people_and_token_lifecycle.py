"""The company's people and tokens with a life cycle (d44227f): who is active and where an
employee came from; tokens named by a public id, with a label, an expiry, a revocation and
their last use.

Employees an older version wrote keep `active` NULL, which reads as active. Tokens issued
before tokens had ids get one, so that list-tokens and revoke-token can name them.

Revision ID: m0003
Revises: m0002
"""

from __future__ import annotations

import secrets

from alembic import op
from sqlalchemy import Boolean, Column, DateTime, String, text

from common.migrations import add_column

revision = "m0003"
down_revision = "m0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_column("employees", Column("active", Boolean))
    add_column("employees", Column("source", String(16)))
    add_column("api_tokens", Column("public_id", String(24)), index=True, unique=True)
    add_column("api_tokens", Column("label", String(100)))
    for name in ("expires_at", "revoked_at", "last_used_at"):
        add_column("api_tokens", Column(name, DateTime(timezone=True)))
    connection = op.get_bind()
    unnamed = connection.execute(
        text("SELECT token_sha256 FROM api_tokens WHERE public_id IS NULL")
    ).scalars()
    for token_sha256 in list(unnamed):
        connection.execute(
            text("UPDATE api_tokens SET public_id = :id WHERE token_sha256 = :sha"),
            # the form mcp_server.storage.new_token_id gives, frozen here with the revision
            {"id": f"tok_{secrets.token_hex(6)}", "sha": token_sha256},
        )
