"""The person a front end acts for, named with each request (docs/identity.md).

A front end's credential names no employee: with each request the front end names the person
it acts for, in the `X-Leave-Acting-For` header (their email, as the HR import gave it). The
bearer-token verifier (auth.py) decides on every request who acts: a front end's credential
acts for the person it names, an employee's own token or sign-in for its employee and no one
else. A request the verifier refuses for its person rather than its token is answered 403 with
the reason, which its caller may know (they hold a sound credential); a refused token stays a
401 without one.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from .replace_401 import Replacement, replacing_401

ACTING_FOR_HEADER = "X-Leave-Acting-For"
_HEADER = ACTING_FOR_HEADER.lower().encode()
MAX_CHARS = 254  # an email's longest

# Set by ActingFor around each request: the header's values, and the verifier's refusal.
_named: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("named", default=())
_refusal: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("refusal", default=None)


class NamedBadly(ValueError):
    """The request names its person in a way no one is named."""


def named() -> str | None:
    """The person the current request names, None when it names nobody; NamedBadly for a
    header given twice, empty, or longer than an email."""
    values = _named.get()
    if not values:
        return None
    if len(values) > 1:
        raise NamedBadly(f"{ACTING_FOR_HEADER} is given {len(values)} times; name one person")
    value = values[0].strip()
    if not value or len(value) > MAX_CHARS:
        raise NamedBadly(f"{ACTING_FOR_HEADER} must be an email of at most {MAX_CHARS} characters")
    return value


def refuse(reason: str) -> None:
    """Answer the current request 403 with `reason` (in place of the SDK's 401)."""
    refusal = _refusal.get()
    if refusal is not None:
        refusal.append(reason)


class ActingFor:
    """Reads the header for the verifier, and answers its refusals 403 with the reason
    (`refused` is called for each: a metric)."""

    def __init__(self, app: ASGIApp, refused: Callable[[], None] = lambda: None) -> None:
        self.app = app
        self.refused = refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        values = tuple(
            value.decode("latin-1") for name, value in scope.get("headers", []) if name == _HEADER
        )
        refusal: list[str] = []
        resets = (_named.set(values), _refusal.set(refusal))

        def refused() -> Replacement | None:
            if not refusal:
                return None
            self.refused()
            return 403, {"error": "acting_for_refused", "error_description": refusal[0]}, []

        try:
            await self.app(scope, receive, replacing_401(send, refused))
        finally:
            _named.reset(resets[0])
            _refusal.reset(resets[1])
