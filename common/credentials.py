"""A bearer token as the services store and compare it: never the token, its SHA-256."""

from __future__ import annotations

import hashlib


def hash_token(token: str) -> str:
    """The token's SHA-256 in hex: the MCP server's key for an issued token, the loop's for the
    user a token stands for."""
    return hashlib.sha256(token.encode()).hexdigest()
