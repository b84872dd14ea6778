"""Who is calling: the bearer token, accepted by the leave MCP server (and cheap to refuse); a
front end's credential with the person it forwards (forwarded.py)."""

import logging
import re
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from common.credentials import hash_token

from ..acting_for import acting
from ..auth_guard import FailureLimiter, RejectedTokens
from ..mcp_pool import McpForbidden, McpUnauthorized, McpUnavailable
from ..owners import owner_key
from ..runs import RunManager
from .forwarded import BadForwarding, forwarded_person

logger = logging.getLogger(__name__)
# RFC 6750 b64token: what a bearer token may contain; anything else is refused before it is
# put into a header of our own (a non-ASCII one cannot even be encoded there).
BEARER_TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")
# When to try again after the MCP server could not be reached (it gave no Retry-After itself).
UNAVAILABLE_RETRY_SECONDS = 5
# The OpenAPI security scheme of every route that takes a user; the route answers a missing
# token itself (auto_error off), with its own message and the failure limiter.
BEARER = HTTPBearer(
    scheme_name="employeeToken",
    description="An employee's token: one the leave MCP server issued "
    "(`python -m mcp_server issue-token`), or a JWT from the company's identity provider.",
    auto_error=False,
)


@dataclass(frozen=True)
class User:
    # the bearer token; a front end's with the person it acts for (loop/acting_for.py)
    token: str
    key: str  # who runs and sessions are owned by: loop/owners.py


@dataclass(frozen=True)
class AuthGuard:
    rejected: RejectedTokens
    limiter: FailureLimiter


def manager_of(request: Request) -> RunManager:
    manager: RunManager = request.app.state.manager
    return manager


async def current_user(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)],
) -> User:
    if credentials is None:  # no Authorization header, another scheme, or no token after it
        raise HTTPException(401, "missing bearer token", {"WWW-Authenticate": "Bearer"})
    bearer = credentials.credentials
    try:
        person = forwarded_person(request.headers)
    except BadForwarding as error:
        raise HTTPException(400, str(error)) from None
    token = bearer if person is None else acting(bearer, person)
    # The token is never compared as a string (no timing side channel to close with
    # hmac.compare_digest): the open connections and refused tokens are found by its SHA-256
    # as a dict key, and the leave MCP server looks that hash up by primary key.
    manager = manager_of(request)
    if manager.pool.has_open(token):  # accepted before: costs nothing to let through
        return User(token=token, key=owner_key(token))
    guard: AuthGuard = request.app.state.auth_guard
    client = request.client.host if request.client else "unknown"
    wait = guard.limiter.retry_after(client)
    if wait:
        raise HTTPException(
            429, "too many failed authentications; try again later", {"Retry-After": str(wait)}
        )

    def refused(detail: str) -> HTTPException:
        guard.limiter.failed(client)
        return HTTPException(401, detail, {"WWW-Authenticate": "Bearer"})

    if not BEARER_TOKEN.fullmatch(bearer):
        raise refused("malformed bearer token")
    key = hash_token(token)
    if key in guard.rejected:
        raise refused("the leave system does not accept this token")
    try:
        owner = await manager.authenticate(token)
    except McpForbidden as error:  # a sound token, not for the person named: nothing to limit
        raise HTTPException(403, str(error)) from None
    except McpUnauthorized:
        guard.rejected.add(key)
        raise refused("the leave system does not accept this token") from None
    except McpUnavailable as error:  # the detail is for the operator, not the caller
        logger.warning("authentication: %s", error)
        wait = error.retry_after if error.retry_after is not None else UNAVAILABLE_RETRY_SECONDS
        raise HTTPException(
            503, "the leave MCP server is unavailable", {"Retry-After": str(wait)}
        ) from None
    return User(token=token, key=owner)


Authenticated = Annotated[User, Depends(current_user)]
