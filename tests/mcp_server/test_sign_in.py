"""Single sign-on: the real MCP server takes the company's access tokens, checked against a
JWKS served here, signed by keys this test makes; and a signed-in user's run through the
real loop reaches their own leaves and nobody else's."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from loop.mcp_pool import McpPool, McpUnavailable
from mcp_server.app import create_app
from mcp_server.settings import ServerSettings
from tests.support import (
    free_port,
    loop_service,
    model_simulator,
    running,
    seed_database,
    serving_in_thread,
    wait_until,
)

from .http_session import INIT, MCP_HEADERS

ISSUER = "https://login.example.com/"
AUDIENCE = "http://mcp-server:8090/mcp"
KID = "key-2026"


@dataclass
class Provider:
    """The identity provider as the MCP server sees it: a JWKS URL, and its signing key."""

    key: rsa.RSAPrivateKey
    jwks_url: str
    answering: threading.Event

    def token(self, key: rsa.RSAPrivateKey | None = None, **claims: Any) -> str:
        now = int(time.time())
        payload = {"iss": ISSUER, "aud": AUDIENCE, "exp": now + 300, "nbf": now - 5,
                   "employee_id": "E001", **claims}  # fmt: skip
        return jwt.encode(payload, key or self.key, algorithm="RS256", headers={"kid": KID})


def unsigned(**claims: Any) -> str:
    """An `alg: none` token: the classic forgery."""
    now = int(time.time())
    payload = {"iss": ISSUER, "aud": AUDIENCE, "exp": now + 300, "employee_id": "E001", **claims}

    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(payload)}."


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    answering = threading.Event()
    answering.set()

    async def jwks(_: Request) -> Response:
        if not answering.is_set():
            return JSONResponse({"error": "down"}, status_code=503)
        return JSONResponse({"keys": [{**public, "kid": KID, "use": "sig", "alg": "RS256"}]})

    app = Starlette(routes=[Route("/.well-known/jwks.json", jwks)])
    with serving_in_thread(app, "the identity provider's JWKS") as base:
        yield Provider(key, f"{base}/.well-known/jwks.json", answering)


@pytest.fixture(scope="module")
def mcp(provider: Provider, tmp_path_factory) -> Iterator[tuple[str, Path, str]]:
    workdir = tmp_path_factory.mktemp("sso")
    db_url = f"sqlite:///{workdir / 'leave.db'}"
    seed_database(db_url)
    port = free_port()
    env = {
        "MCP_DATABASE_URL": db_url,
        "MCP_PORT": str(port),
        "MCP_OIDC_ISSUER": ISSUER,
        "MCP_OIDC_AUDIENCE": AUDIENCE,
        "MCP_OIDC_JWKS_URL": provider.jwks_url,
        "MCP_OIDC_JWKS_REFRESH_SECONDS": "0.5",
        "MCP_OIDC_JWKS_MAX_STALE_SECONDS": "3",
        "MCP_LOG_LEVEL": "INFO",
    }
    base = f"http://127.0.0.1:{port}"
    log = workdir / "mcp.log"
    with running(["mcp_server"], env, log, f"{base}/readyz"):
        yield base, log, db_url


def initialize(base: str, token: str) -> httpx.Response:
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
    return httpx.post(f"{base}/mcp", json=INIT, headers=headers, timeout=30)


def test_a_token_the_provider_signed_lets_its_employee_in(provider, mcp):
    base, _, _ = mcp
    assert initialize(base, provider.token()).status_code == 200


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: p.token(exp=int(time.time()) - 600), "expired"),
        (lambda p: p.token(aud="https://another.example.com"), f"audience is not {AUDIENCE}"),
        (lambda p: p.token(iss="https://evil.example.com/"), f"issuer is not {ISSUER}"),
        (lambda p: p.token(nbf=int(time.time()) + 600), "not valid yet (nbf)"),
        (lambda p: p.token(iat=int(time.time()) + 600), "not valid yet (iat)"),
        (
            lambda p: p.token(key=rsa.generate_private_key(public_exponent=65537, key_size=2048)),
            "the signature does not verify",
        ),
        (lambda p: p.token(employee_id="E999"), "'E999' is no employee who works here"),
        (lambda p: unsigned(), "algorithm 'none' is not accepted"),
    ],
    ids=[
        "expired",
        "audience",
        "issuer",
        "not yet",
        "issued later",
        "wrong key",
        "unknown employee",
        "alg none",
    ],
)
def test_a_bad_token_is_401_with_the_reason_in_the_log_not_the_response(
    provider, mcp, make, reason
):
    base, log, _ = mcp
    answer = initialize(base, make(provider))
    assert answer.status_code == 401
    assert reason not in answer.text
    wait_until(lambda: reason in log.read_text(), timeout=10, what=f"{reason!r} in the log")


def test_cached_keys_work_for_a_bounded_time_when_the_provider_is_down_then_503(provider, mcp):
    base, log, _ = mcp
    token = provider.token()
    assert initialize(base, token).status_code == 200  # keys fetched and held
    provider.answering.clear()
    try:
        down = time.monotonic()
        assert initialize(base, token).status_code == 200  # the held keys, within 3 s
        wait_until(lambda: initialize(base, token).status_code == 503, timeout=15,
                   what="503 once the held keys are too old")  # fmt: skip
        assert time.monotonic() - down >= 2  # not before the staleness bound
        answer = initialize(base, token)
        assert answer.headers["retry-after"] == "30"
        assert "JWKS" in log.read_text() and "answered 503" in log.read_text()
    finally:
        provider.answering.set()
    wait_until(lambda: initialize(base, token).status_code == 200, timeout=15,
               what="sign-ins again once the provider answers")  # fmt: skip


def test_the_resource_metadata_names_the_identity_provider(mcp):
    base, _, _ = mcp
    metadata = httpx.get(f"{base}/.well-known/oauth-protected-resource/mcp", timeout=10)
    if metadata.status_code == 404:
        metadata = httpx.get(f"{base}/.well-known/oauth-protected-resource", timeout=10)
    assert metadata.status_code == 200, metadata.text
    assert metadata.json()["authorization_servers"] == [ISSUER]


async def test_the_resource_metadata_names_the_issuer_exactly_as_set(tmp_path):
    """A bare host came back with a slash added (`https://login.example.com/`): not the `iss`
    the provider's tokens carry, which clients compare as strings."""
    settings = ServerSettings(
        database_url=f"sqlite:///{tmp_path / 'leave.db'}",
        oidc_issuer="https://login.example.com",
        oidc_audience=AUDIENCE,
        oidc_jwks_url="https://login.example.com/keys",
        public_url="https://leave.example.com",
    )
    app = create_app(settings)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://127.0.0.1:8090"
    ) as http:
        metadata = await http.get("/.well-known/oauth-protected-resource/mcp")
    assert metadata.status_code == 200, metadata.text
    assert metadata.json()["authorization_servers"] == ["https://login.example.com"]
    assert metadata.json()["resource"] == "https://leave.example.com/mcp"


def test_a_signed_in_user_reaches_their_own_leaves_through_the_loop_and_no_one_elses(
    provider, mcp, tmp_path
):
    base, _, _ = mcp
    with (
        model_simulator(tmp_path, profile="instant") as sim,
        loop_service(tmp_path, f"{sim}/v1", f"{base}/mcp") as (loop, _),
    ):
        owners = {}
        for employee in ("E001", "E002"):
            token = provider.token(employee_id=employee)
            run = httpx.post(f"{loop}/v1/runs", json={"input": "查一下我的假單"},
                             headers={"Authorization": f"Bearer {token}"}, timeout=60)  # fmt: skip
            assert run.status_code == 200, run.text
            (search,) = [s for s in run.json()["steps"] if s["name"] == "search_leaves"]
            owners[employee] = {leave["employee_id"] for leave in search["result"]["leaves"]}
        forged = httpx.post(f"{loop}/v1/runs", json={"input": "查一下我的假單"},
                            headers={"Authorization": f"Bearer {unsigned()}"}, timeout=60)  # fmt: skip
    assert owners == {"E001": {"E001"}, "E002": {"E002"}}
    assert forged.status_code == 401


def test_a_persons_runs_and_conversation_follow_them_from_one_access_token_to_the_next(
    provider, mcp, tmp_path
):
    """A person's chat page holds a new JWT after every refresh and sign-in; the runs and the
    session they started are theirs by the provider's `iss` and `sub` (loop/owners.py), not
    by the token: the next token reads them and goes on with the conversation. Another
    subject, though the same employee, does not; a forged token with their subject is 401."""
    base, _, _ = mcp

    def as_(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    with (
        model_simulator(tmp_path, profile="instant") as sim,
        loop_service(tmp_path, f"{sim}/v1", f"{base}/mcp") as (loop, _),
    ):
        first = provider.token(sub="person-1", jti="a")
        asked = httpx.post(f"{loop}/v1/runs", json={"input": "查一下我的家庭旅遊假單"},
                           headers=as_(first), timeout=60).json()  # fmt: skip
        later = provider.token(sub="person-1", jti="b")  # refreshed: another token, same person
        listed = httpx.get(f"{loop}/v1/runs", headers=as_(later), timeout=30).json()["runs"]
        follow_up = httpx.post(
            f"{loop}/v1/runs", headers=as_(later), timeout=60,
            json={"input": "剛剛那張也送出審核", "session_id": asked["session_id"]},
        ).json()  # fmt: skip
        someone = provider.token(sub="person-2", jti="c")
        theirs = httpx.get(f"{loop}/v1/runs/{asked['id']}", headers=as_(someone), timeout=30)
        forged = httpx.get(f"{loop}/v1/runs/{asked['id']}", timeout=30,
                           headers=as_(unsigned(sub="person-1")))  # fmt: skip
    assert [r["id"] for r in listed] == [asked["id"]]
    # the history came along: 「剛剛那張」 is the leave the first run found, submitted unsearched
    (family,) = asked["steps"][1]["result"]["leaves"]
    assert [(s["name"], s["arguments"]) for s in follow_up["steps"] if s["type"] == "tool"] == [
        ("update_leave_status", {"leave_id": family["leave_id"], "status": "submitted"})
    ]
    assert follow_up["session_id"] == asked["session_id"]
    assert theirs.status_code == 404
    assert forged.status_code == 401


def test_a_sign_in_outage_ends_a_held_tokens_run_tools_unavailable_and_a_new_token_gets_retry_after(
    provider, mcp, tmp_path
):
    """The identity provider's keys stale past MCP_OIDC_JWKS_MAX_STALE_SECONDS: the MCP server
    answers 503 with Retry-After. A run with a token the loop already holds ends as documented
    (tools_unavailable, an answer saying so); a token the loop has not seen gets the 503 with
    the server's Retry-After."""
    base, _, _ = mcp
    held = {"Authorization": f"Bearer {provider.token(employee_id='E001')}"}
    new = {"Authorization": f"Bearer {provider.token(employee_id='E002')}"}
    ask = {"input": "查一下我的假單"}
    with (
        model_simulator(tmp_path, profile="instant") as sim,
        loop_service(tmp_path, f"{sim}/v1", f"{base}/mcp", rejected_token_cache_seconds="300") as (
            loop,
            _,
        ),
    ):
        before = httpx.post(f"{loop}/v1/runs", json=ask, headers=held, timeout=60).json()
        assert before["status"] == "completed", before
        provider.answering.clear()
        try:
            wait_until(lambda: initialize(base, provider.token()).status_code == 503, timeout=15,
                       what="503 once the held keys are too old")  # fmt: skip
            run = httpx.post(f"{loop}/v1/runs", json=ask, headers=held, timeout=60)
            refused = httpx.post(f"{loop}/v1/runs", json=ask, headers=new, timeout=60)
        finally:
            provider.answering.set()
        wait_until(lambda: initialize(base, provider.token()).status_code == 200, timeout=15,
                   what="sign-ins again once the provider answers")  # fmt: skip
    assert run.status_code == 200, run.text
    final = run.json()
    assert final["status"] == "failed", final
    assert final["reason"].startswith("tools_unavailable: "), final
    assert "503" in final["reason"]
    assert final["answer"], final
    assert refused.status_code == 503, refused.text
    assert refused.headers["retry-after"] == "30"


async def test_a_held_connection_that_lists_its_tools_during_an_outage_is_told_unavailable(
    provider, mcp
):
    """A connection opened while the keys were fresh lists its tools only when a run first
    asks: a 503 then is McpUnavailable with the server's Retry-After, not a bare MCPError
    (which ended runs `failed` with no reason the docs name and no answer)."""
    base, _, _ = mcp
    pool = McpPool(f"{base}/mcp")
    try:
        connection = await pool.connection(provider.token())
        provider.answering.clear()
        try:
            await wait_until_async(
                lambda: initialize(base, provider.token()).status_code == 503,
                what="503 once the held keys are too old",
            )
            with pytest.raises(McpUnavailable) as unavailable:
                await connection.tools()
        finally:
            provider.answering.set()
    finally:
        await pool.close()
    assert unavailable.value.retry_after == 30
    wait_until(lambda: initialize(base, provider.token()).status_code == 200, timeout=15,
               what="sign-ins again once the provider answers")  # fmt: skip


async def wait_until_async(check: Callable[[], bool], *, what: str) -> None:
    """wait_until for a test on the event loop: the blocking check runs on a thread."""
    await asyncio.to_thread(wait_until, check, timeout=15, what=what)
