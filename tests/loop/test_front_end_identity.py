"""Each employee acts as themselves behind a chat front end (issue 33, docs/identity.md): the
`openai` client as Open WebUI sends it with one front-end credential as its key and each
person's user headers (`ENABLE_FORWARD_USER_INFO_HEADERS`), or with the person's own sign-in
token; against the real services over sockets. Every person sees and changes only their own
leaves, the audit log names the person and the front end, a conversation is its person's alone,
and every other way of forwarding someone is refused with a clear error and changes nothing."""

from __future__ import annotations

import datetime as dt
import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import jwt
import openai
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support import (
    loop_service,
    mcp_server,
    model_simulator,
    seed_database,
    serving_in_thread,
    wait_until,
)

AGENT = "leave-copilot-agent"
LEAVE_ID = re.compile(r"LV-[0-9a-f]{6}")
ISSUER, AUDIENCE, KID = "https://login.example.com/", "leave-mcp", "key-1"


@dataclass(frozen=True)
class Person:
    employee_id: str
    name: str
    email: str
    owui_id: str = ""  # Open WebUI's own id of its user (names no employee)


WANG = Person("E001", "王小明", "xiaoming.wang@example.com", str(uuid.uuid4()))
LI = Person("E002", "李小華", "xiaohua.li@example.com", str(uuid.uuid4()))
GONE = Person("C500", "周離職", "gone@example.com", str(uuid.uuid4()))  # imported, then left
STRANGER = Person("", "陌生人", "stranger@example.com", str(uuid.uuid4()))  # not imported


@dataclass
class Services:
    loop: str
    mcp_db_url: str
    store_url: str
    front_end: str  # Open WebUI's credential: issue-token --front-end open-webui
    front_end_id: str
    key: rsa.RSAPrivateKey  # the identity provider's

    def sign_in(self, employee_id: str) -> str:
        """An access token of the company's identity provider for the employee."""
        now = int(time.time())
        claims = {"iss": ISSUER, "aud": AUDIENCE, "exp": now + 300, "employee_id": employee_id}
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": KID})


@pytest.fixture(scope="module")
def services(tmp_path_factory, new_database_url) -> Iterator[Services]:
    workdir = tmp_path_factory.mktemp("front-end-identity")
    mcp_db_url = new_database_url(workdir, "leave")
    seed_database(mcp_db_url)
    token, token_id = _prepare(mcp_db_url)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))

    async def jwks(_: Request) -> Response:
        return JSONResponse({"keys": [{**public, "kid": KID, "use": "sig", "alg": "RS256"}]})

    provider = Starlette(routes=[Route("/jwks.json", jwks)])
    with (
        serving_in_thread(provider, "the identity provider's keys") as idp,
        mcp_server(
            workdir,
            mcp_db_url,
            seed=False,
            MCP_OIDC_ISSUER=ISSUER,
            MCP_OIDC_AUDIENCE=AUDIENCE,
            MCP_OIDC_JWKS_URL=f"{idp}/jwks.json",
        ) as mcp,
        model_simulator(workdir, profile="instant") as sim,
        loop_service(
            workdir,
            f"{sim}/v1",
            f"{mcp}/mcp",
            new_database_url(workdir, "loop"),
            rejected_token_cache_seconds="2",  # a revoked credential stops within it
        ) as (loop, store_url),
    ):
        yield Services(loop, mcp_db_url, store_url, token, token_id, key)


def _prepare(db_url: str) -> tuple[str, str]:
    """The front end's credential; someone imported who has left; two approved leaves of E001
    to cancel through the front end."""
    from mcp_server.identity import Identities
    from mcp_server.storage import Database, Employee, Leave

    database = Database(db_url)
    try:
        with database.write() as s:
            s.add(Employee(id=GONE.employee_id, name=GONE.name, manager_id="M001",
                           email=GONE.email, active=False, source="import"))  # fmt: skip
            for n, reason in enumerate(("前端確認", "前端換人", "前端輪替")):
                day = dt.date(2036, 3, 3) + dt.timedelta(days=n)
                s.add(Leave(id=f"LV-fa{n:04x}", employee_id="E001", leave_type="事假",
                            start_date=day, end_date=day, days=1.0, status="approved",
                            reason=reason))  # fmt: skip
        return Identities(database).issue_front_end("open-webui", label="Open WebUI")
    finally:
        database.dispose()


def open_webui_headers(person: Person) -> dict[str, str]:
    """What Open WebUI 0.12 sends with `ENABLE_FORWARD_USER_INFO_HEADERS=true` (its name
    percent-encoded, as it sends it)."""
    return {
        "X-OpenWebUI-User-Name": quote(person.name, safe=" "),
        "X-OpenWebUI-User-Id": person.owui_id,
        "X-OpenWebUI-User-Email": person.email,
        "X-OpenWebUI-User-Role": "user",
    }


def front_end(services: Services, person: Person | None, key: str | None = None) -> openai.OpenAI:
    """The `openai` client as Open WebUI holds it: the front end's key, the person's headers."""
    return openai.OpenAI(
        base_url=f"{services.loop}/v1",
        api_key=key or services.front_end,
        default_headers=open_webui_headers(person) if person else None,
        max_retries=0,
    )


def say(
    client: openai.OpenAI,
    messages: list[dict[str, str]] | str,
    *,
    chat_id: str | None = None,
    stream: bool = False,
) -> tuple[str, dict[str, Any]]:
    """One chat message (with Open WebUI's sampling settings): (the answer, the run)."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    completion = client.chat.completions.create(
        model=AGENT,
        messages=messages,  # type: ignore[arg-type]
        stream=stream,
        temperature=0.8,
        extra_headers={"X-OpenWebUI-Chat-Id": chat_id} if chat_id else None,
    )
    if stream:
        return "".join(c.choices[0].delta.content or "" for c in completion if c.choices), {}
    run = (completion.model_extra or {}).get("run") or {}
    return completion.choices[0].message.content or "", run


def own_leaves(services: Services, employee_id: str) -> set[str]:
    from mcp_server.leaves import LeaveService
    from mcp_server.storage import Database

    database = Database(services.mcp_db_url)
    try:
        return {v.leave_id for v in LeaveService(database).search(employee_id, "", None)}
    finally:
        database.dispose()


def audited(services: Services, leave_id: str) -> list[tuple[Any, ...]]:
    """(actor, front end, its credential, tool, to, confirmation, outcome) of each entry."""
    from mcp_server.leaves import LeaveService
    from mcp_server.storage import Database

    database = Database(services.mcp_db_url)
    try:
        return [
            (e.actor_id, e.front_end, e.front_end_token_id, str(e.tool), e.to_status,
             e.confirmation, e.outcome)
            for e in LeaveService(database).audit_trail(leave_id)
        ]  # fmt: skip
    finally:
        database.dispose()


def leave_system(services: Services) -> tuple[list[tuple[str, str]], int]:
    """Every leave (id, status) and the audit log's length: what the leave system holds."""
    from sqlalchemy import func, select

    from mcp_server.storage import AuditEntry, Database, Leave

    database = Database(services.mcp_db_url)
    try:
        with database.read() as s:
            leaves = [(row.id, row.status) for row in s.scalars(select(Leave).order_by(Leave.id))]
            return leaves, s.scalar(select(func.count()).select_from(AuditEntry)) or 0
    finally:
        database.dispose()


def runs_recorded(services: Services) -> int:
    from sqlalchemy import func, select

    from loop.store import RunRecord, RunStore

    store = RunStore(services.store_url)
    try:
        with store.sync._session() as s:
            return s.scalar(select(func.count()).select_from(RunRecord)) or 0
    finally:
        store.dispose()


# --- each person as themselves ---------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_two_people_through_one_credential_each_see_only_their_own_leaves(services, stream):
    for person, other in ((WANG, LI), (LI, WANG)):
        answer, _ = say(front_end(services, person), "查一下我的假單", stream=stream)
        shown = set(LEAVE_ID.findall(answer))
        assert shown and shown <= own_leaves(services, person.employee_id), answer
        assert not shown & own_leaves(services, other.employee_id)


def test_each_person_acts_as_themselves_and_the_audit_names_them_and_the_front_end(services):
    answer, run = say(front_end(services, LI), "把我那張加班補休送出審核")
    [leave_id] = LEAVE_ID.findall(answer)
    assert leave_id in own_leaves(services, "E002") and "送出審核" in answer, answer
    assert audited(services, leave_id)[-1] == (
        "E002", "open-webui", services.front_end_id, "update_leave_status", "submitted", None,
        "applied",
    )  # fmt: skip
    # the run is the person's: they read it through the front end, the other person cannot
    read = httpx.get(f"{services.loop}/v1/runs/{run['id']}", headers=_bearer(services, LI))
    assert read.status_code == 200 and read.json()["status"] == "completed"
    other = httpx.get(f"{services.loop}/v1/runs/{run['id']}", headers=_bearer(services, WANG))
    assert other.status_code == 404
    listed = httpx.get(f"{services.loop}/v1/runs", headers=_bearer(services, WANG)).json()
    assert run["id"] not in {r["id"] for r in listed["runs"]}


def _bearer(services: Services, person: Person) -> dict[str, str]:
    return {"Authorization": f"Bearer {services.front_end}", **open_webui_headers(person)}


def test_a_confirmation_is_asked_and_answered_as_the_person_through_the_front_end(services):
    client, chat_id = front_end(services, WANG), f"owui-{uuid.uuid4()}"
    asked, _ = say(client, "取消我前端確認那張假", chat_id=chat_id)
    [leave_id] = LEAVE_ID.findall(asked)
    assert "確定要取消已核准的假單" in asked and leave_id == "LV-fa0000", asked
    done, _ = say(client, "確認", chat_id=chat_id)
    assert done.startswith(f"已取消假單 {leave_id}"), done
    assert audited(services, leave_id) == [
        ("E001", "open-webui", services.front_end_id, "cancel_approved_leave", "cancelled",
         "accepted", "applied"),
    ]  # fmt: skip


def test_a_conversation_id_reused_by_another_person_behind_the_credential_reaches_nothing(
    services,
):
    chat_id = f"owui-{uuid.uuid4()}"
    asked, _ = say(front_end(services, WANG), "取消我前端換人那張假", chat_id=chat_id)
    [leave_id] = LEAVE_ID.findall(asked)
    with pytest.raises(openai.ConflictError) as refused:
        say(front_end(services, LI), "確認", chat_id=chat_id)
    assert refused.value.body["param"] == "x-openwebui-chat-id"
    assert "another user's" in refused.value.body["message"]
    # without the chat id, the question's marker in a copied history reaches nothing either
    history = [{"role": "user", "content": "取消我前端換人那張假"},
               {"role": "assistant", "content": asked}, {"role": "user", "content": "確認"}]  # fmt: skip
    answer, _ = say(front_end(services, LI), history)
    assert answer.startswith("找不到這個確認"), answer
    assert audited(services, leave_id) == []
    kept, _ = say(front_end(services, WANG), "不要", chat_id=chat_id)
    assert "沒有確認取消" in kept, kept
    assert [e[0:2] + e[5:] for e in audited(services, leave_id)] == [
        ("E001", "open-webui", "declined", "not_applied")
    ]


def test_a_conversation_outlives_the_rotation_of_the_front_ends_credential(services):
    """What the loop keeps is the person's, whatever credential of a front end brought them: a
    question asked before the front end switched to its new credential is answered after."""
    from mcp_server.identity import Identities
    from mcp_server.storage import Database

    database = Database(services.mcp_db_url)
    try:
        new, _ = Identities(database).issue_front_end("open-webui", label="rotated")
    finally:
        database.dispose()
    chat_id = f"owui-{uuid.uuid4()}"
    asked, _ = say(front_end(services, WANG), "取消我前端輪替那張假", chat_id=chat_id)
    [leave_id] = LEAVE_ID.findall(asked)
    done, _ = say(front_end(services, WANG, key=new), "確認", chat_id=chat_id)
    assert done.startswith(f"已取消假單 {leave_id}"), done
    # the run went on with the credential it started with, which acted
    assert [e[:3] + e[5:] for e in audited(services, leave_id)] == [
        ("E001", "open-webui", services.front_end_id, "accepted", "applied")
    ]


def test_a_person_forwarding_their_own_sign_in_needs_no_front_end_credential(services):
    """The preferred path: the front end passes each person's own access token on (Open
    WebUI: its connection's auth type "OAuth"), without user headers."""
    own = openai.OpenAI(
        base_url=f"{services.loop}/v1", api_key=services.sign_in("E002"), max_retries=0
    )
    answer, _ = say(own, "查一下我的假單")
    shown = set(LEAVE_ID.findall(answer))
    assert shown and shown <= own_leaves(services, "E002"), answer


# --- refused: a clear error, nothing changed -------------------------------------------------


REFUSALS = {
    "an employee's own token": (
        lambda s: front_end(s, LI, key="demo-token-employee"),
        openai.PermissionDeniedError,
        "this token is E001's own",
    ),
    "a sign-in forwarding someone": (
        lambda s: front_end(s, LI, key=s.sign_in("E001")),
        openai.PermissionDeniedError,
        "this token is E001's own",
    ),
    "an email not in the import": (
        lambda s: front_end(s, STRANGER),
        openai.PermissionDeniedError,
        "no employee has the email 'stranger@example.com'",
    ),
    "someone who left": (
        lambda s: front_end(s, GONE),
        openai.PermissionDeniedError,
        "the employee with the email 'gone@example.com' has left",
    ),
    "the front end forwarding no one": (
        lambda s: front_end(s, None),
        openai.PermissionDeniedError,
        "front end open-webui's credential, which acts only for the person a request names",
    ),
    "Open WebUI's user id without its email": (
        lambda s: openai.OpenAI(
            base_url=f"{s.loop}/v1",
            api_key=s.front_end,
            max_retries=0,
            default_headers={"X-OpenWebUI-User-Id": WANG.owui_id},
        ),
        openai.BadRequestError,
        "x-openwebui-user-id: a forwarded user is named by email",
    ),
    "two different people": (
        lambda s: openai.OpenAI(
            base_url=f"{s.loop}/v1",
            api_key=s.front_end,
            max_retries=0,
            default_headers={**open_webui_headers(WANG), "X-Leave-Acting-For": LI.email},
        ),
        openai.BadRequestError,
        "x-leave-acting-for and x-openwebui-user-email name different people",
    ),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_a_forwarded_identity_from_anything_else_is_refused_and_changes_nothing(services, case):
    make, error, says = REFUSALS[case]
    before = leave_system(services), runs_recorded(services)
    with pytest.raises(error) as refused:
        say(make(services), "把我那張家庭旅遊的特休送出審核")
    assert says in refused.value.body["message"], refused.value.body
    assert (leave_system(services), runs_recorded(services)) == before


def test_a_revoked_front_end_credential_is_refused_for_everyone(services):
    from mcp_server.identity import Identities
    from mcp_server.storage import Database

    database = Database(services.mcp_db_url)
    try:
        token, token_id = Identities(database).issue_front_end("librechat")
        assert say(front_end(services, WANG, key=token), "查一下我的假單")[0]
        Identities(database).revoke(token_id)
    finally:
        database.dispose()
    before = leave_system(services)

    def refused() -> bool:
        try:
            say(front_end(services, WANG, key=token), "查一下我的假單")
        except openai.AuthenticationError:
            return True
        return False

    # the loop asks the server again after its token cache time
    wait_until(refused, timeout=30, what="the revoked credential to be refused")
    for person in (WANG, LI):  # never seen with LI before: refused at once
        with pytest.raises(openai.AuthenticationError):
            say(front_end(services, person, key=token), "把我那張加班補休送出審核")
    assert leave_system(services) == before
