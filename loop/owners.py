"""Who owns a run and a session: the person a bearer token stands for, the same across their
tokens.

A front end acting for a person (loop/acting_for.py) owns nothing itself: the person it names
does, whatever front end or credential carried them. A token the leave system issued is the
person's for its whole life, so its SHA-256 is the key.
An access token from the company's identity provider is a new JWT at every refresh and every
sign-in: keyed by the token, a person signed in to the chat page would lose their conversation
at each refresh or reload and could no longer answer a confirmation the run still waits on. Its
key is the provider and the person's subject instead (`iss` and `sub`, OpenID Connect's stable
identifier of a person at a provider), read from the token after the MCP server accepted it:
it accepts one only with the provider's valid signature (mcp_server/oidc.py), so these claims
are the provider's. Nothing is granted on the key alone: every tool call carries the token,
which the MCP server checks again.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from common.credentials import hash_token

from . import acting_for


def owner_key(token: str) -> str:
    """The key of the person behind `token`, a token the MCP server has accepted (with the
    person a front end acts for, where it names one)."""
    if acting_for.parts(token)[1] is not None:
        # before reading claims: a person's email has dots, and must never pass for a JWT
        return acting_for.owner_key(token)
    claims = _jwt_claims(token)
    issuer = claims.get("iss") if claims else None
    subject = claims.get("sub") if claims else None
    if isinstance(issuer, str) and issuer and isinstance(subject, str) and subject:
        # newlines never occur in a bearer token (RFC 6750), so no issued token hashes alike
        return hash_token(f"oidc\n{issuer}\n{subject}")
    return hash_token(token)


def _jwt_claims(token: str) -> dict[str, Any] | None:
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (binascii.Error, ValueError):
        return None
    return claims if isinstance(claims, dict) else None
