"""A front end acting for the people it names (issue 33, docs/identity.md): its credential from
`issue-token --front-end`, the person named by email in `X-Leave-Acting-For` on every request,
the MCP server deciding who acts; every other way of naming someone refused with its reason;
the audit log naming the person and the front end. `python -m mcp_server` as a real process."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from mcp_server.identity import FrontEnd
from mcp_server.leaves import LeaveService
from mcp_server.storage import AuditEntry, Database
from tests.support import free_port, run_command, running, seed_database

from .helpers import Elicitations, find
from .http_session import INIT, MCP_HEADERS, session

ACTING_FOR = "X-Leave-Acting-For"
E001, E002 = "xiaoming.wang@example.com", "xiaohua.li@example.com"
# imported with an email, then gone
DEPARTED = (
    "employee_id,name,manager_id,email,active\nC300,周離職,M001,Left.Person@Example.com,false\n"
)


@dataclass(frozen=True)
class Server:
    url: str  # its /mcp
    base: str
    db_url: str
    front_end: str  # the open-webui front end's credential
    front_end_id: str


def cli(db_url: str, *args: str) -> tuple[int, str, str]:
    return run_command(["mcp_server", *args], {"MCP_DATABASE_URL": db_url})


@pytest.fixture(scope="module")
def server(tmp_path_factory, new_database_url) -> Iterator[Server]:
    tmp: Path = tmp_path_factory.mktemp("front-ends")
    db_url = new_database_url(tmp, "leave")
    seed_database(db_url)
    (tmp / "departed.csv").write_text(DEPARTED, encoding="utf-8")
    assert cli(db_url, "import", str(tmp / "departed.csv"))[0] == 0
    status, token, said = cli(db_url, "issue-token", "--front-end", "open-webui")
    assert status == 0, said
    [token_id] = re.findall(r"tok_[0-9a-f]+", said)
    assert f"issued {token_id} for the front end open-webui (acts for others" in said
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {"MCP_DATABASE_URL": db_url, "MCP_PORT": str(port)}
    with running(["mcp_server"], env, tmp / "mcp.log", f"{base}/readyz"):
        yield Server(f"{base}/mcp", base, db_url, token.strip(), token_id)


def audit(server: Server, leave_id: str) -> list[tuple[str, str | None, str | None, str | None]]:
    """(actor, front end, its credential's id, confirmation) of each of the leave's entries."""
    database = Database(server.db_url)
    try:
        return [
            (e.actor_id, e.front_end, e.front_end_token_id, e.confirmation)
            for e in LeaveService(database).audit_trail(leave_id)
        ]
    finally:
        database.dispose()


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_one_credential_acts_for_each_person_it_names_and_the_audit_names_both(server, mode):
    as_e001 = {ACTING_FOR: "XiaoMing.Wang@Example.com"}  # any case
    async with session(server.url, server.front_end, mode, headers=as_e001) as client:
        mine = await find(client, "")
        assert mine and {leave["employee_id"] for leave in mine} == {"E001"}
    async with session(server.url, server.front_end, mode, headers={ACTING_FOR: E002}) as client:
        theirs = await find(client, "")
        assert theirs and {leave["employee_id"] for leave in theirs} == {"E002"}
        day = "2033-03-07" if mode == "auto" else "2033-03-08"
        created = await client.call_tool(
            "create_leave",
            {"leave_type": "事假", "start_date": day, "end_date": day, "reason": "前端代理"},
        )
        assert not created.is_error, created.content
        assert created.structured_content["employee_id"] == "E002"
    leave_id = created.structured_content["leave_id"]
    assert audit(server, leave_id) == [("E002", "open-webui", server.front_end_id, None)]


async def test_a_confirmation_through_a_front_end_is_audited_with_it(server):
    headers = {ACTING_FOR: E001}
    async with session(
        server.url, server.front_end, "auto", Elicitations("decline"), headers
    ) as client:
        [wedding] = await find(client, "表妹婚禮", "approved")
        declined = await client.call_tool(
            "cancel_approved_leave", {"leave_id": wedding["leave_id"]}
        )
        assert declined.is_error
    assert audit(server, wedding["leave_id"]) == [
        ("E001", "open-webui", server.front_end_id, "declined")
    ]


def test_an_abandoned_question_is_audited_with_the_front_end_that_asked_it(service):
    front_end = FrontEnd("open-webui", "tok_0123456789ab")
    [wedding] = service.search("E001", "表妹婚禮", "approved")
    service.confirmation_asked("E001", wedding.leave_id, "cancel_approved_leave", front_end)
    assert service.audit_abandoned(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)) == 1
    with service.db.read() as s:
        entry = s.scalars(select(AuditEntry).where(AuditEntry.leave_id == wedding.leave_id)).one()
    assert (entry.actor_id, entry.confirmation, entry.front_end, entry.front_end_token_id) == (
        "E001", "abandoned", "open-webui", "tok_0123456789ab"
    )  # fmt: skip


def probe(server: Server, token: str, *names: tuple[str, str]) -> httpx.Response:
    """An initialize request with this bearer token and these headers (a name may repeat)."""
    headers = [*MCP_HEADERS.items(), ("Authorization", f"Bearer {token}"), *names]
    return httpx.post(server.url, json=INIT, headers=headers)


@pytest.mark.parametrize(
    ("token", "names", "says"),
    [
        ("front end", (), "acts only for the person a request names"),
        ("demo-token-employee", ((ACTING_FOR, E002),), "this token is E001's own"),
        ("demo-token-employee", ((ACTING_FOR, E001),), "this token is E001's own"),
        ("front end", ((ACTING_FOR, "nobody@example.com"),), "no employee has the email"),
        ("front end", ((ACTING_FOR, "left.person@example.com"),), "has left"),
        ("front end", ((ACTING_FOR, E001), (ACTING_FOR, E002)), "given 2 times"),
        ("front end", ((ACTING_FOR, "x" * 250 + "@example.com"),), "at most 254 characters"),
    ],
    ids=[
        "front-end-naming-no-one",
        "employee-token-naming-another",
        "employee-token-naming-themselves",
        "unknown-email",
        "departed-employee",
        "two-people",
        "too-long",
    ],
)
def test_a_person_named_any_other_way_is_refused_with_the_reason(server, token, names, says):
    before = _refusals(server)
    answer = probe(server, server.front_end if token == "front end" else token, *names)
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"] == "acting_for_refused"
    assert says in answer.json()["error_description"]
    assert _refusals(server) == before + 1


def test_a_refused_token_naming_someone_is_a_401_that_says_nothing(server):
    answer = probe(server, "not-a-token", (ACTING_FOR, E001))
    assert answer.status_code == 401 and "E001" not in answer.text and "email" not in answer.text


def _refusals(server: Server) -> float:
    metrics = httpx.get(f"{server.base}/metrics").text
    found = re.search(
        r'^leave_mcp_auth_failures_total\{reason="acting_for"\} (\S+)$', metrics, re.M
    )
    assert found, "the refusals are counted from the start"
    return float(found.group(1))


def test_the_credential_is_listed_revoked_and_then_refused_for_everyone(server, tmp_path):
    _, token, said = cli(server.db_url, "issue-token", "--front-end", "bot.v2", "--label", "x")
    [token_id] = re.findall(r"tok_[0-9a-f]+", said)
    assert probe(server, token.strip(), (ACTING_FOR, E001)).status_code == 200
    listing = cli(server.db_url, "list-tokens")[1]
    [row] = [line for line in listing.splitlines() if line.startswith(token_id)]
    assert row.split()[1:3] == ["front-end:bot.v2", "active"] and token.strip() not in listing
    assert cli(server.db_url, "revoke-token", token_id)[0] == 0
    refused = probe(server, token.strip(), (ACTING_FOR, E001))
    assert refused.status_code == 401 and "E001" not in refused.text


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "name an employee, or --front-end NAME (not both)"),
        (("E001", "--front-end", "open-webui"), "name an employee, or --front-end NAME"),
        (("--front-end", "open webui"), "'open webui' is no front-end name"),
    ],
)
def test_issue_token_says_what_it_needs(server, args, says):
    status, _, said = cli(server.db_url, "issue-token", *args)
    assert status == 2 and says in said


async def test_the_audit_command_shows_the_person_and_the_front_end(server):
    async with session(server.url, server.front_end, "auto", headers={ACTING_FOR: E001}) as client:
        [draft] = await find(client, "家庭旅遊", "draft")
        submitted = await client.call_tool(
            "update_leave_status", {"leave_id": draft["leave_id"], "status": "submitted"}
        )
        assert not submitted.is_error, submitted.content
    status, listing, _ = cli(server.db_url, "audit", draft["leave_id"])
    assert status == 0
    header, *rows = listing.splitlines()
    assert header.split()[:4] == ["at", "leave", "actor", "through"]
    [row] = rows
    assert f"{draft['leave_id']}  E001   open-webui ({server.front_end_id})" in row, listing
    assert "draft → submitted" in row
    status, listing, _ = cli(server.db_url, "audit", "--limit", "200")
    through = [line for line in listing.splitlines() if "open-webui" in line]
    assert through and all(f"open-webui ({server.front_end_id})" in line for line in through)
    assert cli(server.db_url, "audit", "LV-000000")[1].strip() == "no audit entries for LV-000000"
