"""Bearer tokens → employees, for the SDK's auth middleware: a token the leave system issued,
or (with single sign-on set up) an access token from the company's identity provider; or a
front end's credential and the person it names (acting_for.py)."""

from __future__ import annotations

import contextvars
import logging
from typing import Protocol

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from starlette.types import ASGIApp, Receive, Scope, Send

from . import acting_for
from .identity import ActingForRefused, Credential, FrontEnd, IdentityStore, TokenRefused
from .oidc import JwksUnavailable
from .replace_401 import Replacement, replacing_401

logger = logging.getLogger(__name__)


class SignIn(Protocol):
    """The identity provider's access tokens (mcp_server.oidc)."""

    def accepts(self, token: str) -> bool: ...
    async def employee_for(self, token: str) -> str: ...


class EmployeeTokenVerifier:
    """Looks a token up by its hash every time, so that a revoked or expired token, or one of
    an employee who left, is refused at once by every server sharing the database (one
    primary-key read; the last use is written at most once a minute). Refused → None, which the
    SDK answers with HTTP 401; why is logged, never sent.

    No string comparison of the token happens, so there is nothing to make constant-time: the
    database finds the SHA-256 by primary key. How long that takes can depend on the hash,
    never on how much of a stored token a guess got right."""

    def __init__(self, identities: IdentityStore, sign_in: SignIn | None = None) -> None:
        self._identities = identities
        self._sign_in = sign_in

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            if self._sign_in is not None and self._sign_in.accepts(token):
                credential = Credential("a sign-in", await self._sign_in.employee_for(token))
            else:
                credential = await self._identities.credential_for_token(token)
        except TokenRefused as refused:
            logger.info("bearer token refused: %s", refused)
            return None
        except JwksUnavailable as error:
            logger.error("sign-in token not checked, answered 503: %s", error)
            outage = _outage.get()
            if outage is not None:
                outage.append(str(error))
            return None
        try:
            return await self._acting(token, credential)
        except (ActingForRefused, acting_for.NamedBadly) as refused:
            logger.info("forwarded identity refused (%s): %s", credential.public_id, refused)
            acting_for.refuse(str(refused))
            return None

    async def _acting(self, token: str, credential: Credential) -> AccessToken:
        """Who acts with this sound credential: its employee, who names no one else; or, for
        a front end's credential, the person the request names (ActingForRefused otherwise)."""
        person = acting_for.named()
        employee_id = credential.employee_id
        if employee_id is not None:
            if person is not None:
                raise ActingForRefused(
                    f"{acting_for.ACTING_FOR_HEADER} is taken only with a front end's "
                    f"credential; this token is {employee_id}'s own, which acts for them alone"
                )
            return AccessToken(token=token, client_id=employee_id, scopes=[], subject=employee_id)
        if person is None:
            raise ActingForRefused(
                f"{credential.public_id} is the front end {credential.front_end}'s credential, "
                f"which acts only for the person a request names ({acting_for.ACTING_FOR_HEADER}"
                "), and this request names no one"
            )
        employee_id = await self._identities.employee_by_email(person)
        front_end = {"front_end": credential.front_end, "front_end_token_id": credential.public_id}
        # client_id: the front end's credential, subject: the person; the SDK binds a session
        # to both, so one person's session is never another's
        return AccessToken(
            token=token,
            client_id=credential.public_id,
            scopes=[],
            subject=employee_id,
            claims=front_end,
        )


# Set by SignInOutage around each request: the verifier marks in it that the identity
# provider's keys could not be had (the SDK only knows "refused": 401).
_outage: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("outage", default=None)


class SignInOutage:
    """Answers 503 (retry later) instead of the SDK's 401 when a sign-in could not be checked
    because the identity provider's keys cannot be had: the token may be good, and the caller
    should not be told to sign in again."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        outage: list[str] = []
        reset = _outage.set(outage)

        def unavailable() -> Replacement | None:
            if not outage:
                return None
            payload = {
                "error": "temporarily_unavailable",
                "error_description": "sign-in cannot be checked now; retry later",
            }
            return 503, payload, [(b"retry-after", b"30")]

        try:
            await self.app(scope, receive, replacing_401(send, unavailable))
        finally:
            _outage.reset(reset)


def current_employee_id() -> str | None:
    """The employee behind the current request, set by the auth middleware."""
    access = get_access_token()
    return access.subject if access else None


def current_front_end() -> FrontEnd | None:
    """The front end that acts for that employee in the current request; None when the
    employee's own token or sign-in made it."""
    access = get_access_token()
    claims = access.claims if access else None
    if not claims or not claims.get("front_end"):
        return None
    return FrontEnd(str(claims["front_end"]), str(claims["front_end_token_id"]))
