"""Each role the image plays, run from the image, serves and passes the image's own healthcheck."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.support import wait_until

from .helpers import Podman

# the module's first test also pays for the base images and the image build
pytestmark = [pytest.mark.containers, pytest.mark.timeout(900)]

NETWORK = "leave-copilot-roles"
STATE_KEY = "role-test-elicitation-state-key-0000000000000000"
MCP_ENV = [
    "-e",
    "MCP_DATABASE_URL=sqlite:////data/leave.db",
    "-e",
    f"MCP_ELICITATION_STATE_KEY={STATE_KEY}",
    "-e",
    "MCP_HOST=0.0.0.0",
    "-e",
    "MCP_ALLOWED_HOSTS=mcp:8090,127.0.0.1:*,localhost:*",
]


@pytest.fixture(scope="module")
def roles(podman: Podman, image: str, timings) -> Iterator[dict[str, str]]:
    """mcp_server seed → mcp_server, modelsim and loop on one network, as compose wires them."""
    names = {"mcp": "roles-mcp", "sim": "roles-sim", "loop": "roles-loop"}
    podman.run("network", "create", "--internal", NETWORK)
    podman.run("volume", "create", "roles-data")
    try:
        seed = podman.run(
            "run", "--rm", "--network", "none", "-v", "roles-data:/data", *MCP_ENV,
            image, "python", "-m", "mcp_server", "seed", check=False,
        )  # fmt: skip
        assert seed.returncode == 0, seed.stderr
        podman.run(
            "run", "-d", "--init", "--name", names["mcp"], "--network", NETWORK,
            "--network-alias", "mcp", "-v", "roles-data:/data", *MCP_ENV,
            image, "python", "-m", "mcp_server",
        )  # fmt: skip
        podman.run(
            "run", "-d", "--init", "--name", names["sim"], "--network", NETWORK,
            "--network-alias", "sim", "-e", "SIM_HOST=0.0.0.0", "-e", "SIM_PROFILE=instant",
            image, "python", "-m", "modelsim",
        )  # fmt: skip
        podman.run(
            "run", "-d", "--init", "--name", names["loop"], "--network", NETWORK,
            "-e", "LOOP_HOST=0.0.0.0", "-e", "LOOP_STORE_URL=sqlite:////data/loop.db",
            "-e", "LOOP_MODEL_BASE_URL=http://sim:8000/v1", "-e", "LOOP_MCP_URL=http://mcp:8090/mcp",
            image,  # the image's default command is the loop
        )  # fmt: skip
        yield names
    finally:
        for name in names.values():
            logs = podman.run("logs", "--tail", "15", name, check=False)
            if logs.returncode == 0 and "Traceback" in logs.stdout + logs.stderr:
                print(f"--- {name}\n{logs.stdout}{logs.stderr}")
            podman.run("rm", "-f", "-t", "2", name, check=False)
        podman.run("volume", "rm", "-f", "roles-data", check=False)
        podman.run("network", "rm", "-f", NETWORK, check=False)


def healthcheck_passes(podman: Podman, container: str) -> bool:
    state = podman.run("inspect", container, "--format", "{{.State.Status}}").stdout.strip()
    if state != "running":
        logs = podman.run("logs", "--tail", "20", container, check=False)
        raise AssertionError(f"{container} is {state}:\n{logs.stdout}{logs.stderr}")
    return podman.run("healthcheck", "run", container, check=False).returncode == 0


@pytest.mark.parametrize("role", ["mcp", "sim", "loop"])
def test_each_role_serves_and_its_default_healthcheck_passes(podman, roles, role):
    container = roles[role]
    # The image's HEALTHCHECK, not one given at run time: it must find the role by itself.
    configured = podman.run("inspect", container, "--format", "{{json .Config.Healthcheck}}").stdout
    assert "common.healthprobe" in configured
    wait_until(lambda: healthcheck_passes(podman, container), timeout=60, what=container)


def test_the_loop_in_the_image_reaches_its_model_and_tools(podman, roles):
    def ready() -> bool:
        probe = podman.run(
            "exec", roles["loop"], "python", "-m", "common.healthprobe",
            "http://127.0.0.1:8080/readyz", check=False,
        )  # fmt: skip
        return probe.returncode == 0

    wait_until(ready, timeout=60, what="the loop's /readyz inside the image")
    answer = podman.run(
        "exec", roles["loop"], "python", "-c",
        "import json, urllib.request as u;"
        "r = u.Request('http://127.0.0.1:8080/v1/runs', method='POST',"
        " data=json.dumps({'input': '查一下我的假單'}).encode(),"
        " headers={'Authorization': 'Bearer demo-token-employee',"
        " 'Content-Type': 'application/json'});"
        "print(u.urlopen(r, timeout=60).read().decode())",
    )  # fmt: skip
    run = json.loads(answer.stdout)
    assert run["status"] == "completed", run
    assert [s["name"] for s in run["steps"] if s["type"] == "tool"] == ["search_leaves"]
