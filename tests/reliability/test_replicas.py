"""Two MCP server processes on one database behind a round-robin proxy (no session affinity):
in the stateless protocol era a confirmation asked by one replica is answered through the
other, because the question's sealed state opens with the key the replicas share."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ElicitResult
from sqlalchemy import func, select

from mcp_server.leaves import LeaveService
from mcp_server.storage import Database, PendingConfirmation
from tests.mcp_server.invariants import assert_books_balance
from tests.support import free_port, running, seed_database

pytestmark = pytest.mark.reliability


@dataclass(frozen=True)
class Replicas:
    proxy: str
    db_url: str

    def routes(self) -> list[dict[str, Any]]:
        routed: list[dict[str, Any]] = httpx.get(f"{self.proxy}/proxy/routes").json()
        return routed


@contextmanager
def replicas_behind_proxy(workdir: Path, db_url: str, keys: list[str]) -> Iterator[Replicas]:
    """One `python -m mcp_server` per key, all on `db_url`, and the proxy in front."""
    with ExitStack() as stack:
        backends = []
        for i, key in enumerate(keys):
            port = free_port()
            env = {
                "MCP_DATABASE_URL": db_url,
                "MCP_PORT": str(port),
                "MCP_ELICITATION_STATE_KEY": key,
            }
            base = f"http://127.0.0.1:{port}"
            stack.enter_context(
                running(["mcp_server"], env, workdir / f"replica-{i}.log", f"{base}/readyz")
            )
            backends.append(base)
        port = free_port()
        proxy = f"http://127.0.0.1:{port}"
        stack.enter_context(
            running(
                ["tests.reliability.round_robin_proxy"],
                {"PROXY_PORT": str(port), "PROXY_BACKENDS": ",".join(backends)},
                workdir / "proxy.log",
                f"{proxy}/proxy/health",
            )
        )
        yield Replicas(proxy, db_url)


def new_shared_database(request: pytest.FixtureRequest, backend: str, folder: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{folder / 'leave.db'}"  # one file, both processes (WAL)
    postgres = request.getfixturevalue("postgres")
    name = f"replicas_{secrets.token_hex(4)}"
    password = secrets.token_urlsafe(16)
    postgres.create_database(name, owner_password=password)
    return str(postgres.url(name, name, password))


@pytest.fixture(scope="module", params=["postgresql", "sqlite"])
def replicas(request, tmp_path_factory) -> Iterator[Replicas]:
    workdir = tmp_path_factory.mktemp(f"replicas-{request.param}")
    db_url = new_shared_database(request, request.param, workdir)
    seed_database(db_url)
    key = secrets.token_hex(32)
    with replicas_behind_proxy(workdir, db_url, [key, key]) as running_replicas:
        yield running_replicas


class Answer:
    def __init__(self, action: str) -> None:
        self.action = action
        self.asked = 0

    async def __call__(self, _context: Any, _params: Any) -> ElicitResult:
        self.asked += 1
        if self.action == "accept":
            return ElicitResult(action="accept", content={"confirm": True})
        return ElicitResult(action=self.action)


@asynccontextmanager
async def session(url: str, token: str, answer: Answer) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(
            streamable_http_client(f"{url}/mcp", http_client=http),
            mode="auto",
            elicitation_callback=answer,
            read_timeout_seconds=30,
        ) as client,
    ):
        yield client


async def approved_leave(client: Client, keyword: str) -> dict[str, Any]:
    found = await client.call_tool("search_leaves", {"keyword": keyword, "status": "approved"})
    leaves: list[dict[str, Any]] = found.structured_content["leaves"]
    assert len(leaves) == 1, leaves
    return leaves[0]


def cancel_rounds(routes: list[dict[str, Any]]) -> list[tuple[int, bool]]:
    """(backend, carries answers) of each cancel_approved_leave request, in order."""
    return [(r["backend"], r["answers"]) for r in routes if r["tool"] == "cancel_approved_leave"]


def audit_and_pending(db_url: str, leave_id: str) -> tuple[list[tuple[Any, ...]], int]:
    database = Database(db_url)
    try:
        assert_books_balance(database)
        trail = [
            (e.tool, e.from_status, e.to_status, e.confirmation, e.outcome)
            for e in LeaveService(database).audit_trail(leave_id)
        ]
        with database.read() as s:
            pending = s.scalar(
                select(func.count())
                .select_from(PendingConfirmation)
                .where(PendingConfirmation.leave_id == leave_id)
            )
        return trail, int(pending or 0)
    finally:
        database.dispose()


async def balance_of(client: Client, leave_type: str) -> float:
    result = await client.call_tool("get_leave_balance", {})
    lines = result.structured_content["balances"]
    return float(next(b["remaining_days"] for b in lines if b["leave_type"] == leave_type))


async def test_a_cancel_asked_by_one_replica_is_accepted_through_the_other(replicas):
    answer = Answer("accept")
    async with session(replicas.proxy, "demo-token-employee", answer) as client:
        wedding = await approved_leave(client, "婚禮")
        before = await balance_of(client, "特休")
        routed_before = len(replicas.routes())
        result = await client.call_tool("cancel_approved_leave", {"leave_id": wedding["leave_id"]})
        after = await balance_of(client, "特休")
        again = await client.call_tool("search_leaves", {"keyword": "婚禮"})
    rounds = cancel_rounds(replicas.routes()[routed_before:])
    trail, pending = audit_and_pending(replicas.db_url, wedding["leave_id"])
    print(
        f"cancel rounds (replica, answers): {rounds}; asked {answer.asked}; "
        f"特休 {before} → {after}; audit {trail}"
    )

    assert [answers for _, answers in rounds] == [False, True]
    assert rounds[0][0] != rounds[1][0], "both rounds reached the same replica"
    assert answer.asked == 1
    assert not result.is_error, result.content
    assert result.structured_content["to_status"] == "cancelled"
    assert again.structured_content["leaves"][0]["status"] == "cancelled"
    assert after == before + wedding["days"]
    assert trail == [("cancel_approved_leave", "approved", "cancelled", "accepted", "applied")]
    assert pending == 0


async def test_a_cancel_declined_through_the_other_replica_changes_nothing(replicas):
    answer = Answer("decline")
    async with session(replicas.proxy, "demo-token-other", answer) as client:
        graduation = await approved_leave(client, "畢業典禮")
        before = await balance_of(client, "特休")
        routed_before = len(replicas.routes())
        result = await client.call_tool(
            "cancel_approved_leave", {"leave_id": graduation["leave_id"]}
        )
        after = await balance_of(client, "特休")
        still = await approved_leave(client, "畢業典禮")
    rounds = cancel_rounds(replicas.routes()[routed_before:])
    trail, pending = audit_and_pending(replicas.db_url, graduation["leave_id"])
    print(f"decline rounds (replica, answers): {rounds}; 特休 {before} → {after}; audit {trail}")

    assert [answers for _, answers in rounds] == [False, True]
    assert rounds[0][0] != rounds[1][0], "both rounds reached the same replica"
    assert result.is_error and result.structured_content["error"]["code"] == (
        "confirmation_declined"
    )
    assert still["status"] == "approved" and after == before
    assert trail == [("cancel_approved_leave", "approved", "approved", "declined", "not_applied")]
    assert pending == 0


async def test_replicas_with_their_own_keys_cannot_take_each_others_answers(tmp_path):
    """The control: without the shared key the same route fails, so the tests above did cross
    replicas, and a forged or foreign state is refused rather than acted on."""
    db_url = f"sqlite:///{tmp_path / 'leave.db'}"
    seed_database(db_url)
    keys = [secrets.token_hex(32), secrets.token_hex(32)]
    with replicas_behind_proxy(tmp_path, db_url, keys) as replicas:
        answer = Answer("accept")
        async with session(replicas.proxy, "demo-token-employee", answer) as client:
            wedding = await approved_leave(client, "婚禮")
            routed_before = len(replicas.routes())
            try:
                result = await client.call_tool(
                    "cancel_approved_leave", {"leave_id": wedding["leave_id"]}
                )
                refused = result.is_error
            except MCPError:
                refused = True
            still = await approved_leave(client, "婚禮")
        rounds = cancel_rounds(replicas.routes()[routed_before:])
    trail, _pending = audit_and_pending(db_url, wedding["leave_id"])
    print(f"foreign-key rounds (replica, answers): {rounds}; refused {refused}; audit {trail}")
    assert rounds[:2] == [(rounds[0][0], False), (1 - rounds[0][0], True)]
    assert refused and still["status"] == "approved"
    assert [e for e in trail if e[4] == "applied"] == []
