"""Bearer tokens → employees, for the SDK's auth middleware."""

from __future__ import annotations

import hashlib
import time

import anyio.to_thread
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken

from .leaves import LeaveService


class EmployeeTokenVerifier:
    """Looks a token up by its hash; an unknown token (or a demo token in production) → None,
    which the SDK answers with HTTP 401.

    No string comparison of the token happens, so there is nothing to make constant-time: the
    database finds the SHA-256 by primary key and the cache by dict key. How long either takes
    can depend on the hash, never on how much of a stored token a guess got right, and knowing
    bytes of a hash does not help find a token that has it."""

    def __init__(self, service: LeaveService, cache_seconds: float = 30.0) -> None:
        self._service = service
        self._cache_seconds = cache_seconds
        # Every MCP request carries the token; remembering recent hits saves a database round
        # trip per request. A revoked token keeps working for at most `cache_seconds`.
        self._recent: dict[str, tuple[float, str]] = {}

    async def verify_token(self, token: str) -> AccessToken | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        hit = self._recent.get(key)
        employee_id: str | None
        if hit and hit[0] > now:
            employee_id = hit[1]
        else:
            employee_id = await anyio.to_thread.run_sync(self._service.employee_for_token, token)
            if employee_id is None:
                self._recent.pop(key, None)
                return None
            if len(self._recent) > 10_000:
                self._recent.clear()
            self._recent[key] = (now + self._cache_seconds, employee_id)
        return AccessToken(token=token, client_id=employee_id, scopes=[], subject=employee_id)


def current_employee_id() -> str | None:
    """The employee behind the current request, set by the auth middleware."""
    access = get_access_token()
    return access.subject if access else None
