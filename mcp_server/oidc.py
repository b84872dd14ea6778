"""Single sign-on: the MCP server as an OAuth resource server for the company's identity
provider. An access token is a JWT the provider signed: its signature is checked against the
provider's published keys (JWKS), and `iss`, `aud`, `exp` and `nbf` against the settings; a
claim names the employee, who must still work here.

The keys are fetched when first needed and again every `MCP_OIDC_JWKS_REFRESH_SECONDS` (or
when a token names a key not seen yet). When the JWKS URL does not answer, the keys last
fetched keep working for `MCP_OIDC_JWKS_MAX_STALE_SECONDS`; after that sign-ins are answered
503 (JwksUnavailable), never let in on an unverified key.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx2
import jwt

from .identity import IdentityStore, TokenRefused

logger = logging.getLogger(__name__)
# A token naming a key the set does not have makes us fetch the set again, at most this often:
# otherwise made-up key ids would have us hammer the provider.
UNKNOWN_KEY_REFETCH_SECONDS = 30.0
FETCH_TIMEOUT_SECONDS = 5.0
LEEWAY_SECONDS = 30  # clock skew allowed on exp and nbf


class JwksUnavailable(Exception):
    """The provider's keys cannot be had and the ones held are too old to trust."""


@dataclass(frozen=True)
class SignInSettings:
    issuer: str
    audience: str
    jwks_url: str
    employee_claim: str
    algorithms: tuple[str, ...]
    refresh_seconds: float
    max_stale_seconds: float


class ProviderKeys:
    """The provider's JWKS, fetched and held; see the module's docstring for when."""

    def __init__(self, settings: SignInSettings) -> None:
        self._settings = settings
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None  # monotonic, of the last successful fetch
        self._tried_at = 0.0
        self._lock = asyncio.Lock()

    async def key(self, kid: str | None) -> jwt.PyJWK:
        now = time.monotonic()
        due = self._fetched_at is None or now - self._fetched_at > self._settings.refresh_seconds
        unknown = kid not in self._keys and now - self._tried_at > UNKNOWN_KEY_REFETCH_SECONDS
        if due or unknown:
            await self._refresh()
        if self._fetched_at is None or (
            time.monotonic() - self._fetched_at > self._settings.max_stale_seconds
        ):
            raise JwksUnavailable(f"no keys from {self._settings.jwks_url} recent enough to trust")
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        found = self._keys.get(kid or "")
        if found is None:
            raise TokenRefused(f"signed with key {kid!r}, which the provider does not publish")
        return found

    async def _refresh(self) -> None:
        async with self._lock:
            self._tried_at = time.monotonic()
            try:
                async with httpx2.AsyncClient(timeout=FETCH_TIMEOUT_SECONDS) as http:
                    answer = await http.get(self._settings.jwks_url)
                answer.raise_for_status()
                keys = jwt.PyJWKSet.from_dict(answer.json()).keys
            except (httpx2.HTTPError, ValueError, jwt.PyJWTError) as error:
                age = "none held" if self._fetched_at is None else (
                    f"the held ones are {time.monotonic() - self._fetched_at:.0f} s old"
                )  # fmt: skip
                logger.warning(
                    "JWKS %s unreachable (%s): %s", self._settings.jwks_url, age,
                    type(error).__name__,
                )  # fmt: skip
                return
            self._keys = {k.key_id or "": k for k in keys}
            self._fetched_at = time.monotonic()


class SignIn:
    """Access tokens of the company's identity provider → employee ids (TokenRefused with the
    reason for the log, or JwksUnavailable)."""

    def __init__(self, settings: SignInSettings, identities: IdentityStore) -> None:
        self._settings = settings
        self._identities = identities
        self._keys = ProviderKeys(settings)

    def accepts(self, token: str) -> bool:
        """A JWT, by its shape; a token the leave system issued never has two dots."""
        return token.count(".") == 2

    async def employee_for(self, token: str) -> str:
        s = self._settings
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as error:
            raise TokenRefused(f"not a JWT: {error}") from None
        algorithm = header.get("alg")
        if algorithm not in s.algorithms:  # "none" among them: it is never in the setting
            raise TokenRefused(
                f"algorithm {algorithm!r} is not accepted ({', '.join(s.algorithms)})"
            )
        key = await self._keys.key(header.get("kid"))
        claims = _decoded(token, key, s)
        employee_id = claims.get(s.employee_claim)
        if not isinstance(employee_id, str) or not employee_id:
            raise TokenRefused(f"the token has no {s.employee_claim} claim naming an employee")
        if not await self._identities.active_employee(employee_id):
            raise TokenRefused(f"{s.employee_claim} {employee_id!r} is no employee who works here")
        return employee_id


def _decoded(token: str, key: jwt.PyJWK, s: SignInSettings) -> dict[str, Any]:
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            key,
            algorithms=list(s.algorithms),
            audience=s.audience,
            issuer=s.issuer,
            leeway=LEEWAY_SECONDS,
            options={"require": ["exp", "iss", "aud"]},
        )
    except jwt.ExpiredSignatureError:
        raise TokenRefused("expired") from None
    except jwt.ImmatureSignatureError as error:
        # PyJWT says which claim lies in the future: issued at (iat) or not before (nbf)
        claim = "iat" if "(iat)" in str(error) else "nbf"
        raise TokenRefused(f"not valid yet ({claim})") from None
    except jwt.InvalidAudienceError:
        raise TokenRefused(f"audience is not {s.audience}") from None
    except jwt.InvalidIssuerError:
        raise TokenRefused(f"issuer is not {s.issuer}") from None
    except jwt.InvalidSignatureError:
        raise TokenRefused("the signature does not verify with the provider's key") from None
    except jwt.PyJWTError as error:
        raise TokenRefused(f"invalid: {error}") from None
    return claims
