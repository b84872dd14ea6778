"""The compose options beyond the default layout: PostgreSQL (profile "postgres") and MCP
server replicas, resolved by the real Compose binary."""

from __future__ import annotations

import os

import pytest

from stack import compose
from stack.preflight import published_ports

POSTGRES_ENV = {
    "COMPOSE_PROFILES": "postgres",
    "POSTGRES_PASSWORD": "a-site-password",
    "MCP_DATABASE_URL": "postgresql://leave:a-site-password@postgres:5432/leave",
    "LOOP_STORE_URL": "postgresql://leave:a-site-password@postgres:5432/loop",
}


def resolved(**environ: str) -> dict:
    return compose.config(sim=True, environ={"PATH": os.environ["PATH"], **environ})


def test_postgres_is_off_unless_its_profile_is_on():
    project = resolved()
    assert "postgres" not in project["services"]
    assert project["services"]["mcp-server"]["environment"]["MCP_DATABASE_URL"] == (
        "sqlite:////data/leave.db"
    )
    # the dependants' wait for it is optional, so they start without it
    assert project["services"]["mcp-server"]["depends_on"]["postgres"]["required"] is False


def test_the_postgres_profile_serves_both_databases_health_gated():
    services = resolved(**POSTGRES_ENV)["services"]
    postgres = services["postgres"]
    assert postgres["environment"]["POSTGRES_PASSWORD"] == "a-site-password"
    assert postgres["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]
    assert postgres["restart"] == "unless-stopped" and "ports" not in postgres
    assert postgres["networks"] == {"backend": None}
    targets = {v["target"]: v for v in postgres["volumes"]}
    assert targets["/var/lib/postgresql/data"]["type"] == "volume"
    initdb = targets["/docker-entrypoint-initdb.d"]
    assert initdb["read_only"] and "CREATE DATABASE loop" in "".join(
        p.read_text() for p in (compose.DEPLOY / "postgres" / "initdb").glob("*.sql")
    )
    for name in ("mcp-seed", "mcp-server", "loop"):
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy", name
    assert services["mcp-server"]["environment"]["MCP_DATABASE_URL"].endswith(
        "@postgres:5432/leave"
    )
    assert services["loop"]["environment"]["LOOP_STORE_URL"].endswith("@postgres:5432/loop")


def test_postgres_has_no_default_password():
    assert resolved(COMPOSE_PROFILES="postgres")["services"]["postgres"]["environment"][
        "POSTGRES_PASSWORD"
    ] in ("", None)
    example = compose.EXAMPLE_ENV.read_text().splitlines()
    assert "POSTGRES_PASSWORD=" in example


def test_mcp_server_replicas_share_the_key_and_take_a_port_each():
    project = resolved(MCP_REPLICAS="2", MCP_PUBLISHED_PORT="18090-18091")
    server = project["services"]["mcp-server"]
    assert server["deploy"]["replicas"] == 2
    assert server["ports"][0]["published"] == "18090-18091"
    assert server["environment"]["MCP_ELICITATION_STATE_KEY"]  # required, one value for all
    assert published_ports(project)["mcp-server"] == 18090
    assert resolved()["services"]["mcp-server"]["deploy"]["replicas"] == 1


@pytest.mark.parametrize(
    ("published", "ports"), [("8090", [8090]), (8090, [8090]), ("8090-8092", [8090, 8091, 8092])]
)
def test_host_ports_of_a_port_or_a_range(published, ports):
    assert compose.host_ports(published) == ports


def test_a_backwards_port_range_is_a_clear_error():
    with pytest.raises(ValueError, match="ends before it starts"):
        compose.host_ports("8091-8090")
