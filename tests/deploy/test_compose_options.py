"""The compose options beyond the default layout: PostgreSQL (profile "postgres"), MCP
server replicas and traces (profile "tracing"), resolved by the real Compose binary."""

from __future__ import annotations

import os

import pytest
import yaml

from ops import compose
from ops.preflight import published_ports
from tests.deploy.vllm_flags import recorded_flags

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


COLLECTOR = "http://otel-collector:4318/v1/traces"
TRACED = {"COMPOSE_PROFILES": "tracing", "OTLP_TRACES_ENDPOINT": COLLECTOR}


def traced_services(sim: bool, **environ: str) -> dict:
    env = {"PATH": os.environ["PATH"], **environ}
    if not sim:
        env["COMPOSE_PROFILES"] = ",".join(filter(None, ["gpu", env.get("COMPOSE_PROFILES")]))
    return compose.config(sim=sim, environ=env)


def test_traces_are_off_unless_an_endpoint_is_set(monkeypatch):
    gpu = traced_services(sim=False)["services"]
    sim = traced_services(sim=True)["services"]
    assert "--otlp-traces-endpoint" not in gpu["vllm-0"]["command"]
    assert "otel-collector" not in gpu and "otel-collector" not in sim
    assert sim["loop"]["environment"]["LOOP_OTLP_TRACES_ENDPOINT"] == ""
    assert sim["mcp-server"]["environment"]["MCP_OTLP_TRACES_ENDPOINT"] == ""
    assert sim["vllm-0"]["environment"]["SIM_OTLP_TRACES_ENDPOINT"] == ""
    # the empty value compose passes is "unset" to every service
    from loop.settings import LoopSettings
    from mcp_server.settings import ServerSettings
    from modelsim.settings import SimSettings

    for name in ("LOOP", "MCP", "SIM"):
        monkeypatch.setenv(f"{name}_OTLP_TRACES_ENDPOINT", "")
    assert LoopSettings().otlp_traces_endpoint is None
    assert ServerSettings().otlp_traces_endpoint is None
    assert SimSettings().otlp_traces_endpoint is None


def test_an_endpoint_turns_on_every_services_traces_and_vllms_own():
    gpu = traced_services(sim=False, **TRACED)["services"]
    command = gpu["vllm-0"]["command"]
    at = command.index("--otlp-traces-endpoint")
    assert command[at + 1] == COLLECTOR and "--otlp-traces-endpoint" in recorded_flags()[0]
    # vLLM's exporter speaks gRPC unless told; the collector's 4318 is OTLP/HTTP
    assert gpu["vllm-0"]["environment"]["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    assert gpu["loop"]["environment"]["LOOP_OTLP_TRACES_ENDPOINT"] == COLLECTOR
    for name in ("mcp-seed", "mcp-server"):
        assert gpu[name]["environment"]["MCP_OTLP_TRACES_ENDPOINT"] == COLLECTOR
    sim = traced_services(sim=True, **TRACED)["services"]
    assert sim["vllm-0"]["environment"]["SIM_OTLP_TRACES_ENDPOINT"] == COLLECTOR


@pytest.mark.parametrize("backend", ["", "http://tempo.example.internal:4318"])
def test_the_collector_receives_otlp_and_sends_it_where_the_site_says(backend):
    project = traced_services(sim=True, **TRACED, TRACES_BACKEND_URL=backend)
    collector = project["services"]["otel-collector"]
    assert collector["image"] == "otel/opentelemetry-collector:0.149.0"
    assert collector["profiles"] == ["tracing"] and collector["restart"] == "unless-stopped"
    # vLLM's network is internal: the collector is the way out for its spans
    assert set(collector["networks"]) == {"backend", "frontend"}
    (mounted,) = collector["configs"]
    assert collector["command"] == [f"--config={mounted['target']}"]
    config = yaml.safe_load(project["configs"][mounted["source"]]["content"])
    protocols = config["receivers"]["otlp"]["protocols"]
    assert protocols == {"grpc": {"endpoint": "0.0.0.0:4317"}, "http": {"endpoint": "0.0.0.0:4318"}}
    pipeline = config["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"] and pipeline["processors"] == ["batch"]
    assert set(pipeline["exporters"]) == set(config["exporters"])
    if backend:
        assert pipeline["exporters"] == ["debug", "otlphttp"]
        assert config["exporters"]["otlphttp"] == {"endpoint": backend}
    else:
        assert pipeline["exporters"] == ["debug"]  # printed to its log, sent nowhere
    # nothing waits for it: a collector that is down never holds up the stack
    assert all(
        "otel-collector" not in s.get("depends_on", {}) for s in project["services"].values()
    )
