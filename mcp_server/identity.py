"""Who may call: the bearer tokens the leave system issues (a life cycle: expiry, revocation,
last use) and whether the employee behind one still works here.

A token lets in its employee; a front end's credential (`issue-token --front-end NAME`) names
no employee and lets in only the person the front end names with each request, by the email
the HR import gave them (docs/identity.md).

Tokens are stored as their SHA-256 and named by a public id, so neither the database nor a
listing ever shows a usable secret.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import secrets
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from sqlalchemy import bindparam, delete, func, select, update

from common.credentials import hash_token
from common.dbapi import CompiledStatement
from common.sqlite import utcnow

from .storage import ApiToken, AsyncStore, Database, Employee, new_token_id

# How often a token's last use is written: once a minute is enough to see which tokens are
# used, and it keeps a write off every request.
TOUCH_EVERY = dt.timedelta(seconds=60)
_DURATION = re.compile(r"^(\d+)([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# A token's lifetime at most: beyond it a date overflows (a year past 9999), and no token needs
# one so long (leave --expires-in out for a token that never expires).
MAX_LIFETIME_DAYS = 3650

logger = logging.getLogger(__name__)


class UnknownEmployee(LookupError):
    """No employee has this id."""


class InactiveEmployee(ValueError):
    """The employee has left the company."""


class TokenRefused(Exception):
    """A token that does not (or no longer) let anyone in; the reason is for the log only."""


class ActingForRefused(Exception):
    """A sound credential, but not for the person a request names (or for nobody): a front
    end's credential without a person, a person's own token naming another, a person no front
    end can act for. The reason is told to the caller, who holds that credential."""


# A front end's name: what the audit log and list-tokens show it by.
FRONT_END_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class FrontEnd:
    """A front end acting for a person: its name and its credential's public id."""

    name: str
    token_id: str


@dataclass(frozen=True)
class Credential:
    """What a token is: an employee's (`employee_id`), or a front end's (`front_end`)."""

    public_id: str
    employee_id: str | None
    front_end: str | None = None


@dataclass(frozen=True)
class TokenListing:
    """A token as `list-tokens` shows it: everything but the secret."""

    public_id: str
    employee_id: str | None
    label: str
    created_at: dt.datetime
    expires_at: dt.datetime | None
    revoked_at: dt.datetime | None
    last_used_at: dt.datetime | None
    is_demo: bool
    front_end: str | None = None

    def state(self, now: dt.datetime) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "demo" if self.is_demo else "active"


def parse_duration(text: str) -> dt.timedelta:
    """ "90d", "12h", "30m", "3600s", "2w" → a timedelta; ValueError otherwise."""
    found = _DURATION.match(text.strip())
    if not found or int(found.group(1)) == 0:
        raise ValueError(f"{text!r} is not a duration such as 90d, 12h, 30m or 3600s")
    count, unit = int(found.group(1)), found.group(2)
    if count * _SECONDS[unit] > MAX_LIFETIME_DAYS * 86400:
        raise ValueError(
            f"{text!r} is longer than {MAX_LIFETIME_DAYS} days; leave --expires-in out for a "
            "token that never expires"
        )
    return dt.timedelta(**{_UNITS[unit]: count})


class Identities:
    def __init__(self, db: Database, *, production: bool = False) -> None:
        self.db = db
        self.production = production
        # The last use is written off the request path: a sign-in must never wait for the
        # database's write lock (a long write elsewhere would hold up every caller).
        self._recorder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="token-use")
        self._recording: set[str] = set()
        self._recording_lock = threading.Lock()
        lookup = (
            select(
                ApiToken.token_sha256,
                ApiToken.employee_id,
                ApiToken.public_id,
                ApiToken.is_demo,
                ApiToken.expires_at,
                ApiToken.revoked_at,
                ApiToken.last_used_at,
                ApiToken.front_end,
                Employee.id,
                Employee.active,
            )
            .outerjoin(Employee, Employee.id == ApiToken.employee_id)
            .where(ApiToken.token_sha256 == bindparam("token"))
        )
        self._token_lookup = CompiledStatement(lookup, db.engine.dialect)
        by_email = select(Employee.id, Employee.active).where(Employee.email == bindparam("email"))
        self._email_lookup = CompiledStatement(by_email, db.engine.dialect)

    def employee_for_token(self, token: str) -> str:
        """The employee a token lets in; TokenRefused, with the reason, otherwise (a front
        end's credential lets no one in by itself)."""
        credential = self.credential_for_token(token)
        if credential.employee_id is None:
            raise TokenRefused(f"{credential.public_id} is the front end {credential.front_end}'s")
        return credential.employee_id

    def credential_for_token(self, token: str) -> Credential:
        """What a token is, if it lets anyone in; TokenRefused, with the reason, otherwise."""
        now = utcnow()
        # Every MCP request asks this: one statement on the driver's cursor, not two ORM reads
        # (which cost more CPU than the search a call then makes).
        with self.db.cursor() as cursor:
            row = self._token_lookup.first(cursor, {"token": hash_token(token)})
        if row is None:
            raise TokenRefused("unknown token")
        (
            token_sha256,
            employee_id,
            public_id,
            is_demo,
            expires_at,
            revoked_at,
            last_used_at,
            front_end,
            found_employee,
            active,
        ) = row
        name = public_id or "a token"
        if is_demo and self.production:
            raise TokenRefused(f"{name} is a demo token, refused in production")
        if revoked_at is not None:
            raise TokenRefused(f"{name} was revoked")
        if expires_at is not None and expires_at <= now:
            raise TokenRefused(f"{name} expired at {expires_at.isoformat()}")
        if front_end is None and (found_employee is None or active is False):
            # active None: a row older versions wrote
            raise TokenRefused(f"{name}'s employee {employee_id} no longer works here")
        if last_used_at is None or last_used_at < now - TOUCH_EVERY:
            self._record_use(token_sha256, now)
        if front_end is not None:
            return Credential(name, None, str(front_end))
        return Credential(name, str(employee_id))

    def employee_by_email(self, email: str) -> str:
        """The employee a front end names by this email (any case); ActingForRefused when no
        one who works here has it."""
        address = normal_email(email)
        with self.db.cursor() as cursor:  # as the token's lookup: on every such request
            found = self._email_lookup.first(cursor, {"email": address})
        if found is None:
            raise ActingForRefused(
                f"no employee has the email {address!r} (the HR import's email column)"
            )
        employee_id, active = found
        if active is False:
            raise ActingForRefused(f"the employee with the email {address!r} has left")
        return str(employee_id)

    def _record_use(self, token_sha256: str, now: dt.datetime) -> None:
        with self._recording_lock:
            if token_sha256 in self._recording:  # already on its way
                return
            self._recording.add(token_sha256)
        self._recorder.submit(self._write_use, token_sha256, now)

    def _write_use(self, token_sha256: str, now: dt.datetime) -> None:
        try:
            with self.db.write() as s:
                s.execute(
                    update(ApiToken)
                    .where(ApiToken.token_sha256 == token_sha256)
                    .values(last_used_at=now)
                )
        except Exception as error:  # a statistic: the next use a minute on tries again
            logger.warning("token last use not recorded: %s", error)
        finally:
            with self._recording_lock:
                self._recording.discard(token_sha256)

    def flush(self) -> None:
        """Wait for the last uses on their way to the database (shutdown, tests)."""
        self._recorder.submit(lambda: None).result()

    def active_employee(self, employee_id: str) -> bool:
        """Whether this employee exists and still works here (a sign-in's claim names one)."""
        with self.db.read() as s:
            employee = s.get(Employee, employee_id)
            return employee is not None and employee.is_active

    def issue(
        self,
        employee_id: str,
        *,
        expires_in: dt.timedelta | None = None,
        label: str | None = None,
        demo: bool = False,
        token: str | None = None,
    ) -> tuple[str, str]:
        """A new token for the employee: (the token, shown once; its public id)."""
        token = token or secrets.token_urlsafe(32)
        public_id = new_token_id()
        with self.db.write() as s:
            employee = s.get(Employee, employee_id)
            if employee is None:
                raise UnknownEmployee(employee_id)
            if not employee.is_active:
                raise InactiveEmployee(employee_id)
            s.merge(
                ApiToken(
                    token_sha256=hash_token(token),
                    employee_id=employee_id,
                    is_demo=demo,
                    public_id=public_id,
                    label=label,
                    expires_at=utcnow() + expires_in if expires_in else None,
                )
            )
        return token, public_id

    def issue_front_end(
        self, name: str, *, expires_in: dt.timedelta | None = None, label: str | None = None
    ) -> tuple[str, str]:
        """A new credential for a front end that acts for the people it names: (the token,
        shown once; its public id). ValueError for a name that is not one."""
        if not FRONT_END_NAME.fullmatch(name):
            raise ValueError(
                f"{name!r} is no front-end name: letters, digits, '.', '_' and '-', at most 64"
            )
        token = secrets.token_urlsafe(32)
        public_id = new_token_id()
        with self.db.write() as s:
            s.add(
                ApiToken(
                    token_sha256=hash_token(token),
                    employee_id=None,
                    front_end=name,
                    public_id=public_id,
                    label=label,
                    expires_at=utcnow() + expires_in if expires_in else None,
                )
            )
        return token, public_id

    def tokens(self) -> list[TokenListing]:
        with self.db.read() as s:
            rows = s.scalars(select(ApiToken).order_by(ApiToken.created_at)).all()
            return [
                TokenListing(
                    row.public_id or "",
                    row.employee_id,
                    row.label or "",
                    row.created_at,
                    row.expires_at,
                    row.revoked_at,
                    row.last_used_at,
                    row.is_demo,
                    row.front_end,
                )
                for row in rows
            ]

    def revoke(self, public_id: str) -> bool:
        """Revoke the token with this id (at once, on every server that shares the database);
        False when no token has it. Revoking twice changes nothing."""
        with self.db.write() as s:
            row = s.scalars(select(ApiToken).where(ApiToken.public_id == public_id)).first()
            if row is None:
                return False
            if row.revoked_at is None:
                row.revoked_at = utcnow()
            return True

    def deactivate(self, employee_id: str) -> bool:
        """The employee left: their tokens and sign-ins stop working, their history stays.
        False when they were already inactive; UnknownEmployee when there is no such one."""
        with self.db.write() as s:
            employee = s.get(Employee, employee_id)
            if employee is None:
                raise UnknownEmployee(employee_id)
            if not employee.is_active:
                return False
            employee.active = False
            return True

    def demo_tokens(self) -> int:
        with self.db.read() as s:
            return s.scalar(select(func.count()).where(ApiToken.is_demo.is_(True))) or 0

    def remove_demo_tokens(self) -> int:
        with self.db.write() as s:
            removed = s.execute(delete(ApiToken).where(ApiToken.is_demo.is_(True)))
            return int(getattr(removed, "rowcount", 0) or 0)


class IdentityStore(AsyncStore):
    """Who may call, as the serving process asks it: the Identities methods a request's sign-in
    uses, each a coroutine that runs where it should (see AsyncStore). `sync` is the
    Identities itself (the operator commands, tests)."""

    def __init__(self, identities: Identities) -> None:
        super().__init__(identities.db)
        self.sync = identities

    async def credential_for_token(self, token: str) -> Credential:
        """See Identities.credential_for_token: every MCP request asks it."""
        return await self._read(partial(self.sync.credential_for_token, token))

    async def employee_by_email(self, email: str) -> str:
        """See Identities.employee_by_email: every request a front end makes asks it."""
        return await self._read(partial(self.sync.employee_by_email, email))

    async def active_employee(self, employee_id: str) -> bool:
        """See Identities.active_employee."""
        return await self._on_thread(partial(self.sync.active_employee, employee_id))


def normal_email(email: str) -> str:
    """An email as it is stored and compared: without surrounding spaces, in lower case."""
    return email.strip().lower()
