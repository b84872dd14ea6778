"""The bearer-token verifier and the production settings guard."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mcp_server.auth import EmployeeTokenVerifier
from mcp_server.leaves import LeaveService
from mcp_server.settings import ServerSettings


async def test_verifier_maps_tokens_and_caches_only_hits(service: LeaveService, monkeypatch):
    verifier = EmployeeTokenVerifier(service)
    lookups: list[str] = []
    real = service.employee_for_token
    monkeypatch.setattr(
        service, "employee_for_token", lambda token: lookups.append(token) or real(token)
    )
    first = await verifier.verify_token("demo-token-manager")
    second = await verifier.verify_token("demo-token-manager")
    assert first.subject == second.subject == "M001"
    assert lookups == ["demo-token-manager"]
    assert await verifier.verify_token("nope") is None
    assert await verifier.verify_token("nope") is None
    assert lookups.count("nope") == 2


def test_tokens_are_stored_hashed(service: LeaveService):
    from sqlalchemy import select

    from mcp_server.storage import ApiToken

    with service.db.read() as s:
        stored = s.scalars(select(ApiToken.token_sha256)).all()
    assert stored and all(len(h) == 64 and not h.startswith("demo") for h in stored)


def test_demo_tokens_are_dead_in_production(database):
    assert LeaveService(database).employee_for_token("demo-token-employee") == "E001"
    assert LeaveService(database, production=True).employee_for_token("demo-token-employee") is None


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


def test_allowed_hosts_read_as_a_comma_separated_list(monkeypatch):
    monkeypatch.setenv("MCP_ALLOWED_HOSTS", "mcp-server:8090, 127.0.0.1:*")
    assert ServerSettings().allowed_hosts == ["mcp-server:8090", "127.0.0.1:*"]
