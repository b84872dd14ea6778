"""deploy/compose.load.yaml, the Locust master and workers, through the real Compose binary."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from loadtest.settings import LoadSettings
from ops import compose

WORKERS = "3"


def project(profiles: str, **variables: str) -> dict:
    environ = {**os.environ, "COMPOSE_PROFILES": profiles, **variables}
    return compose.config(sim=True, extra_files=[compose.LOAD_FILE], environ=environ)


@pytest.fixture(scope="module")
def load() -> dict:
    return project("load", LOAD_WORKERS=WORKERS, LOAD_ARGS="--shape spike --users 2")


def test_the_load_generators_start_only_when_asked_for():
    services = project("")["services"]
    assert "locust-master" not in services and "locust-worker" not in services
    assert {"loop", "vllm-0", "vllm-router", "mcp-server"} <= set(services)


def test_workers_can_be_scaled(load):
    for name in ("locust-master", "locust-worker"):
        service = load["services"][name]
        assert "container_name" not in service, name
        assert service["restart"] == "no" and service["healthcheck"]["disable"] is True
        repository, _, tag = service["image"].rpartition(":")
        assert repository and re.fullmatch(r"\d+\.\d+\.\d+", tag), service["image"]
        assert (compose.REPO_ROOT / service["build"]["dockerfile"]).is_file()
    assert "ports" not in load["services"]["locust-worker"]  # N copies cannot share a host port


def test_master_and_workers_share_the_results_volume_and_reach_the_stack(load):
    services = load["services"]
    master, worker = services["locust-master"], services["locust-worker"]
    mounts = [[(v["source"], v["target"]) for v in s["volumes"]] for s in (master, worker)]
    assert mounts[0] == mounts[1] == [("load-results", "/results")]
    for name in ("vllm-router", "loop", "mcp-server", "prometheus"):
        assert set(master["networks"]) & set(services[name]["networks"]), name
        assert set(worker["networks"]) & set(services[name]["networks"]), name
    assert master["depends_on"]["loop"]["condition"] == "service_healthy"
    assert master["depends_on"]["mcp-server"]["condition"] == "service_healthy"


def split(command: list[str]) -> tuple[list[str], list[str]]:
    cut = command.index("--")
    return command[:cut], command[cut + 1 :]


def test_the_master_runs_python_m_loadtest_at_the_stacks_addresses(load):
    services = load["services"]
    ours, locusts = split(services["locust-master"]["command"])
    assert ours[:3] == ["python", "-m", "loadtest"]
    given = dict(zip(ours[3::2], ours[4::2], strict=True))
    assert given["--loop-url"] == f"http://loop:{services['loop']['environment']['LOOP_PORT']}"
    # the model users load the replicas through the router, as the loop does
    assert given["--model-url"] == services["loop"]["environment"]["LOOP_MODEL_BASE_URL"]
    assert given["--prometheus-url"] == "http://prometheus:9090"
    # where the users make their own leaves: a host name the MCP server accepts
    mcp = services["mcp-server"]["environment"]
    assert given["--mcp-url"] == f"http://mcp-server:{mcp['MCP_PORT']}/mcp"
    assert f"mcp-server:{mcp['MCP_PORT']}" in mcp["MCP_ALLOWED_HOSTS"]
    assert given["--shape"] == "spike" and given["--users"] == "2"  # LOAD_ARGS
    assert locusts[:3] == ["--master", "--expect-workers", WORKERS]


def test_the_worker_connects_to_the_master_service(load):
    command = load["services"]["locust-worker"]["command"]
    assert command[:5] == ["python", "-m", "locust", "-f", "loadtest/locustfile.py"]
    assert command[command.index("--master-host") + 1] == "locust-master"
    assert "--worker" in command


def test_every_flag_is_one_its_program_knows(load):
    ours, locusts = split(load["services"]["locust-master"]["command"])
    known = {f"--{name.replace('_', '-')}" for name in LoadSettings.model_fields}
    assert {a for a in ours if a.startswith("--")} <= known
    locust_help = subprocess.run(
        [sys.executable, "-m", "locust", "--help"], capture_output=True, text=True, check=True
    ).stdout
    worker = load["services"]["locust-worker"]["command"]
    for flag in [a for a in [*locusts, *worker] if a.startswith("--")]:
        assert re.search(rf"(^|\s|,){re.escape(flag)}(\s|,|=|$)", locust_help, re.M), flag
