"""The chat page's stack for the browser tests: the real services as processes (the simulator,
the MCP server taking the identity provider's tokens, the loop serving the page), oidc-provider
as the company's identity provider, and the leave database read back as the checks need it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from common.contract import LeaveStatus
from mcp_server.leaves import new_leave_id, working_days
from mcp_server.storage import AuditEntry, Balance, Database, Leave
from tests.support import (
    ServiceProcess,
    free_port,
    mcp_server,
    model_simulator,
    seed_database,
)

from .provider import Account, IdentityProvider

CLIENT_ID = "leave-copilot-chat"
# The MCP server's audience, as a site sets MCP_OIDC_AUDIENCE: the resource the page asks its
# access token for (never fetched: a name).
AUDIENCE = "http://mcp-server:8090/mcp"
XIAOMING = Account("xiaoming", "correct horse battery staple", "8f2c41d7", "王小明", "E001")


@dataclass(frozen=True)
class AuditRow:
    actor: str
    tool: str
    from_status: str | None
    to_status: str | None
    confirmation: str | None
    outcome: str


class LeaveBook:
    """The leave database, read (and, before the services start, added to) directly."""

    def __init__(self, url: str) -> None:
        self.url = url

    def add_approved(self, employee_id: str, weeks_ahead: int, days: int, reason: str) -> str:
        """An approved 特休 of `days` working days, its days taken from the balance, as an
        approval would have left it."""
        start = dt.date.today() + dt.timedelta(weeks=weeks_ahead)
        start += dt.timedelta(days=(7 - start.weekday()) % 7)  # a Monday
        end = start + dt.timedelta(days=days - 1)
        database = Database(self.url)
        try:
            with database.write() as s:
                leave_id = new_leave_id()
                taken = float(working_days(start, end))
                s.add(Leave(id=leave_id, employee_id=employee_id, leave_type="特休",
                            start_date=start, end_date=end, days=taken,
                            status=LeaveStatus.APPROVED, reason=reason))  # fmt: skip
                balance = s.get(Balance, (employee_id, "特休"))
                assert balance is not None
                balance.remaining_days -= taken
            return leave_id
        finally:
            database.dispose()

    def leave(self, reason_part: str, employee_id: str = "E001") -> Leave:
        """The employee's one leave whose reason holds `reason_part`."""
        database = Database(self.url)
        try:
            with database.read() as s:
                found = s.scalars(
                    select(Leave).where(
                        Leave.employee_id == employee_id, Leave.reason.contains(reason_part)
                    )
                ).all()
                assert len(found) == 1, [(v.id, v.reason) for v in found]
                s.expunge(found[0])
                return found[0]
        finally:
            database.dispose()

    def audit(self, leave_id: str) -> list[AuditRow]:
        database = Database(self.url)
        try:
            with database.read() as s:
                rows = s.scalars(
                    select(AuditEntry)
                    .where(AuditEntry.leave_id == leave_id)
                    .order_by(AuditEntry.id)
                ).all()
                return [AuditRow(r.actor_id, r.tool, r.from_status, r.to_status, r.confirmation,
                                 r.outcome) for r in rows]  # fmt: skip
        finally:
            database.dispose()

    def balance(self, employee_id: str, leave_type: str) -> float:
        database = Database(self.url)
        try:
            with database.read() as s:
                balance = s.get(Balance, (employee_id, leave_type))
                assert balance is not None
                return balance.remaining_days
        finally:
            database.dispose()


class Loop:
    """`python -m loop` on a port of its own, which it keeps when restarted: the address the
    page and the provider's redirect URI know, as behind a site's proxy."""

    def __init__(self, workdir: Path, settings: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workdir = workdir
        self.settings = {**settings, "LOOP_PORT": str(self.port)}
        self.starts = 0
        self.process: ServiceProcess | None = None

    def start(self) -> None:
        self.starts += 1
        log = self.workdir / f"loop-{self.starts}.log"
        self.process = ServiceProcess(["loop"], self.settings, log)
        self.process.wait_ready(f"{self.url}/healthz")

    def stop(self) -> None:
        """SIGTERM, as a stop or a recreated container sends: a run waiting on a person's
        answer is left for the next loop on the store to go on with."""
        if self.process is not None:
            self.process.stop()
            self.process = None


@dataclass
class ChatStack:
    loop: str
    provider: IdentityProvider
    book: LeaveBook
    workdir: Path
    loop_process: Loop


@contextmanager
def chat_stack(
    workdir: Path,
    *,
    access_token_ttl: int,
    confirmation_timeout: float,
    extra_leaves: list[tuple[int, int, str]],
) -> Iterator[ChatStack]:
    """The stack, E001 also holding the approved leaves `extra_leaves` names (weeks ahead,
    days, reason). The loop is started before the provider, whose client registration names
    the loop's address as the redirect URI; the provider's port is chosen first, for both."""
    provider_port = free_port()
    issuer = f"http://127.0.0.1:{provider_port}"
    book = LeaveBook(f"sqlite:///{workdir / 'leave.db'}")
    seed_database(book.url)
    for weeks, days, reason in extra_leaves:
        book.add_approved("E001", weeks, days, reason)
    sign_in = {
        "MCP_OIDC_ISSUER": issuer,
        "MCP_OIDC_AUDIENCE": AUDIENCE,
        "MCP_OIDC_JWKS_URL": f"{issuer}/jwks",
        # keys fetched again at once after the provider's restart (a key rotation)
        "MCP_OIDC_JWKS_REFRESH_SECONDS": "0.5",
    }
    with (
        model_simulator(workdir, profile="instant") as sim,
        mcp_server(workdir, book.url, seed=False, **sign_in) as mcp,
    ):
        loop = Loop(workdir, {
            "LOOP_MODEL_BASE_URL": f"{sim}/v1",
            "LOOP_MCP_URL": f"{mcp}/mcp",
            "LOOP_STORE_URL": f"sqlite:///{workdir / 'loop.db'}",
            "LOOP_CHAT_OIDC_ISSUER": issuer,
            "LOOP_CHAT_OIDC_CLIENT_ID": CLIENT_ID,
            "LOOP_CHAT_OIDC_SCOPES": "openid profile leave",
            "LOOP_CHAT_OIDC_RESOURCE": AUDIENCE,
            "LOOP_CONFIRMATION_TIMEOUT_SECONDS": str(confirmation_timeout),
        })  # fmt: skip
        provider = IdentityProvider(
            workdir, provider_port, client_id=CLIENT_ID, redirect_uris=[f"{loop.url}/"],
            audience=AUDIENCE, accounts=[XIAOMING], access_token_ttl=access_token_ttl,
        )  # fmt: skip
        try:
            loop.start()
            provider.start()
            yield ChatStack(loop.url, provider, book, workdir, loop)
        finally:
            provider.stop()
            loop.stop()
