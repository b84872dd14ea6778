"""The bearer-token verifier and the production settings guard."""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import threading

import pytest
from pydantic import ValidationError
from sqlalchemy import update

from common.entrypoint import load_settings
from common.sqlite import utcnow
from mcp_server.auth import EmployeeTokenVerifier
from mcp_server.identity import (
    Credential,
    Identities,
    IdentityStore,
    InactiveEmployee,
    TokenRefused,
    parse_duration,
)
from mcp_server.leaves import LeaveService
from mcp_server.settings import ServerSettings
from mcp_server.storage import ApiToken, Database


async def test_verifier_maps_tokens_and_refuses_what_it_does_not_know(database, caplog):
    verifier = EmployeeTokenVerifier(IdentityStore(Identities(database)))
    found = await verifier.verify_token("demo-token-manager")
    assert found is not None and found.subject == "M001"
    with caplog.at_level(logging.INFO, logger="mcp_server.auth"):
        assert await verifier.verify_token("nope") is None
    assert "unknown token" in caplog.text and "nope" not in caplog.text


@pytest.mark.parametrize("in_place", [True, False])
async def test_the_token_is_looked_up_in_place_only_where_reads_never_wait(
    database, monkeypatch, in_place
):
    # A thread hop costs more CPU than SQLite's primary-key read; across a network (PostgreSQL)
    # the read must not hold up the event loop.
    if in_place and not database.reads_in_place:
        pytest.skip("reads are made in place on a SQLite file only")
    monkeypatch.setattr(database, "reads_in_place", in_place)
    identities = Identities(database)
    looked_up_on: list[int] = []
    lookup = identities.credential_for_token

    def recorded(token: str) -> Credential:
        looked_up_on.append(threading.get_ident())
        return lookup(token)

    monkeypatch.setattr(identities, "credential_for_token", recorded)
    found = await EmployeeTokenVerifier(IdentityStore(identities)).verify_token(
        "demo-token-employee"
    )
    assert found is not None and found.subject == "E001"
    assert (looked_up_on == [threading.get_ident()]) is in_place


def test_only_a_sqlite_files_reads_are_made_in_place(tmp_path):
    assert Database(f"sqlite:///{tmp_path / 'leave.db'}").reads_in_place
    assert not Database("sqlite://").reads_in_place  # in memory: one database per connection
    assert not Database("postgresql+psycopg://leave@127.0.0.1:1/leave").reads_in_place


async def test_a_token_is_checked_in_place_while_writers_hold_every_pooled_connection(database):
    # Writers queued for SQLite's write lock each hold a pooled connection; a check made on the
    # event loop that waited for one would stall every request until a writer let go.
    if not database.reads_in_place:
        pytest.skip("reads are made in place on a SQLite file only")
    pool = database.engine.pool
    held = [database.engine.raw_connection() for _ in range(pool.size() + pool._max_overflow)]
    try:
        found = await EmployeeTokenVerifier(IdentityStore(Identities(database))).verify_token(
            "demo-token-employee"
        )
    finally:
        for connection in held:
            connection.close()
    assert found is not None and found.subject == "E001"


def test_tokens_are_stored_hashed(service: LeaveService):
    from sqlalchemy import select

    from mcp_server.storage import ApiToken

    with service.db.read() as s:
        stored = s.scalars(select(ApiToken.token_sha256)).all()
    assert stored and all(len(h) == 64 and not h.startswith("demo") for h in stored)


def test_demo_tokens_are_dead_in_production(database):
    assert Identities(database).employee_for_token("demo-token-employee") == "E001"
    with pytest.raises(TokenRefused, match="demo token"):
        Identities(database, production=True).employee_for_token("demo-token-employee")


async def test_a_revoked_expired_or_departed_token_is_refused_at_once(database, caplog):
    """No cache stands between revoke-token (another process) and the next request."""
    identities = Identities(database)
    verifier = EmployeeTokenVerifier(IdentityStore(identities))
    revoked, revoked_id = identities.issue("E001", label="laptop")
    expiring, _ = identities.issue("E001", expires_in=dt.timedelta(seconds=60))
    departing, _ = identities.issue("E002")
    assert all([await verifier.verify_token(t) for t in (revoked, expiring, departing)])
    assert identities.revoke(revoked_id) and identities.revoke(revoked_id)  # twice: no-op
    with database.write() as s:  # the minute passes
        s.execute(
            update(ApiToken)
            .where(ApiToken.expires_at.is_not(None))
            .values(expires_at=utcnow() - dt.timedelta(seconds=1))
        )
    assert identities.deactivate("E002") and not identities.deactivate("E002")
    with caplog.at_level(logging.INFO, logger="mcp_server.auth"):
        refused = [await verifier.verify_token(t) for t in (revoked, expiring, departing)]
    assert refused == [None, None, None]
    for reason in ("was revoked", "expired at", "no longer works here"):
        assert reason in caplog.text
    with pytest.raises(InactiveEmployee):
        identities.issue("E002")  # no new token for someone who left
    assert identities.revoke("tok_nothing") is False


def test_a_listing_names_each_token_and_its_use_never_its_secret(database):
    identities = Identities(database)
    token, public_id = identities.issue(
        "M001", label="payroll sync", expires_in=dt.timedelta(days=30)
    )
    identities.employee_for_token(token)  # used once: the last use is written
    identities.flush()
    listed = {t.public_id: t for t in identities.tokens()}
    mine = listed[public_id]
    assert (mine.employee_id, mine.label, mine.state(utcnow())) == (
        "M001",
        "payroll sync",
        "active",
    )
    assert mine.last_used_at is not None and mine.expires_at > utcnow() + dt.timedelta(days=29)
    assert {t.state(utcnow()) for t in listed.values() if t.is_demo} == {"demo"}
    assert token not in repr(list(listed.values()))


def test_a_token_lets_its_employee_in_while_another_writer_holds_the_database(tmp_path):
    """Writing the last use never holds up a sign-in: with the write lock taken elsewhere
    (a long write, a backup), the token still lets its employee in, and the use is written
    once the lock is free."""
    import sqlite3

    from mcp_server.seed import seed
    from mcp_server.storage import Database

    path = tmp_path / "leave.db"
    database = Database(f"sqlite:///{path}")
    seed(database)
    identities = Identities(database)
    token, public_id = identities.issue("E001")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        assert identities.employee_for_token(token) == "E001"
        assert identities.employee_for_token(token) == "E001"
    finally:
        other.execute("ROLLBACK")
        other.close()
    identities.flush()
    assert next(t for t in identities.tokens() if t.public_id == public_id).last_used_at
    database.dispose()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90d", dt.timedelta(days=90)),
        ("12h", dt.timedelta(hours=12)),
        ("2w", dt.timedelta(weeks=2)),
    ],
)
def test_durations_read_as_people_write_them(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "0d", "10", "1y", "-3d", "3 days"])
def test_a_duration_that_is_not_one_is_refused(text):
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    "key",
    [None, "dev-elicitation-state-key-not-for-production-use-000000", "short"],
)
def test_production_settings_refuse_missing_default_or_weak_keys(key, monkeypatch):
    monkeypatch.setenv("MCP_ENV", "production")
    if key:
        monkeypatch.setenv("MCP_ELICITATION_STATE_KEY", key)
    with pytest.raises(ValidationError):
        ServerSettings()


SHIPPED = "dev-elicitation-state-key-not-for-production-use-000000"


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("a" * 32, "the key is too easy to guess"),
        ("ab" * 32, "the key is too easy to guess"),
        (SHIPPED[:-1] + "1", "the key is the example key shipped in deploy/.env.example, or that "
                             "key edited"),
        (SHIPPED.upper(), "the key is the example key shipped"),
        (SHIPPED.replace("dev", "prd") + "x", "the key is the example key shipped"),
        (f"{secrets.token_hex(32)},{'k' * 40}", "key 2 of 2 is too easy to guess"),
    ],
    ids=["a x 32", "ab x 32", "shipped, a digit changed", "shipped, upper case",
         "shipped, edited", "a ring with one weak key"],
)  # fmt: skip
def test_production_refuses_keys_that_are_long_but_guessable(key, why, monkeypatch, capsys):
    """The check counted characters: 32 × `a`, and the shipped key with one digit changed,
    both started."""
    monkeypatch.setenv("MCP_ENV", "production")
    monkeypatch.setenv("MCP_ELICITATION_STATE_KEY", key)
    assert load_settings(ServerSettings) is None
    said = capsys.readouterr().err
    assert f"MCP_ELICITATION_STATE_KEY: {why}" in said
    assert "secrets.token_hex(32)" in said
    assert all(part not in said for part in key.split(","))  # never the secret itself


@pytest.mark.parametrize(
    "key",
    [secrets.token_hex(32), secrets.token_hex(16), secrets.token_urlsafe(32)],
    ids=["token_hex(32)", "token_hex(16)", "token_urlsafe(32)"],
)
def test_production_takes_a_key_made_as_the_docs_say(key, monkeypatch):
    monkeypatch.setenv("MCP_ENV", "production")
    monkeypatch.setenv("MCP_ELICITATION_STATE_KEY", key)
    assert ServerSettings().elicitation_state_keys == [key]


@pytest.mark.parametrize(
    ("issuer", "jwks", "refused"),
    [
        ("http://login.example.com", "https://login.example.com/keys", "MCP_OIDC_ISSUER"),
        ("https://login.example.com", "http://login.example.com/keys", "MCP_OIDC_JWKS_URL"),
        ("https://login.example.com", "https://login.example.com/keys", None),
        ("http://127.0.0.1:9000", "http://localhost:9000/keys", None),  # on this host
        ("http://[::1]:9000", "http://127.0.0.1:9000/keys", None),
    ],
)
def test_production_takes_the_identity_provider_over_https_only(
    issuer, jwks, refused, monkeypatch, capsys
):
    """http:// issuer and key-set URLs were taken: whoever is on the way serves keys of their
    own, and signs in as anyone."""
    for name, value in (("MCP_OIDC_ISSUER", issuer), ("MCP_OIDC_JWKS_URL", jwks),
                        ("MCP_OIDC_AUDIENCE", "https://leave.example.com/mcp")):  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MCP_ELICITATION_STATE_KEY", secrets.token_hex(32))
    assert load_settings(ServerSettings) is not None  # development takes http anywhere
    monkeypatch.setenv("MCP_ENV", "production")
    loaded = load_settings(ServerSettings)
    said = capsys.readouterr().err
    if refused is None:
        assert loaded is not None, said
    else:
        assert loaded is None
        assert f"{refused} must be an https:// URL in production" in said


def test_allowed_hosts_read_as_a_comma_separated_list(monkeypatch):
    monkeypatch.setenv("MCP_ALLOWED_HOSTS", "mcp-server:8090, 127.0.0.1:*")
    assert ServerSettings().allowed_hosts == ["mcp-server:8090", "127.0.0.1:*"]


def test_the_key_shipped_in_the_examples_is_one_production_knows():
    """The likeness check compares with KNOWN_DEFAULT_SECRETS: the example's key must be in it."""
    from mcp_server.settings import KNOWN_DEFAULT_SECRETS
    from ops.compose import REPO_ROOT

    shipped = [
        line.split("=", 1)[1].strip()
        for line in (REPO_ROOT / "deploy" / ".env.example").read_text().splitlines()
        if line.startswith("MCP_ELICITATION_STATE_KEY=")
    ]
    assert shipped and set(shipped) <= KNOWN_DEFAULT_SECRETS
