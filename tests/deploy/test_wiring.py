"""Wiring proof: the compose file's own commands and environment, run as local processes.

Service hostnames map to 127.0.0.1 and ports to free ones; if a URL, port or variable name in
compose.yaml did not fit its service, the seed scenario below could not complete.
"""

from __future__ import annotations

import os

import httpx
import pytest

from devtools.demo import stream_run
from devtools.localstack import LocalStack, plan
from ops import compose, layout
from tests.support import free_port


@pytest.fixture(scope="module")
def local_stack(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    environ = {
        **os.environ,
        "LOOP_PUBLISHED_PORT": str(free_port()),
        "MCP_PUBLISHED_PORT": str(free_port()),
    }
    # the two-replica simulator layout, as `make up-sim` writes it for VLLM_GPUS=2
    two = layout.write_for(
        compose.EXAMPLE_ENV, sim=True, environ={**environ, "VLLM_GPUS": "2"},
        path=run_dir / "compose.layout.yaml",
    )  # fmt: skip
    assert [r.gpus for r in two.replicas] == [("0",), ("1",)]
    project = compose.config(
        sim=True, environ=environ, extra_files=[run_dir / "compose.layout.yaml"]
    )
    services = plan(project, run_dir, local_model_port=free_port())
    stack = LocalStack(run_dir)
    try:
        stack.up(services, reset=True)
        yield {s.name: s for s in services}, stack
    finally:
        stack.stop()


def test_compose_commands_are_what_runs(local_stack):
    services, stack = local_stack
    assert set(stack.running()) == {"vllm-0", "vllm-1", "vllm-router", "mcp-server", "loop"}
    assert services["loop"].command[1:] == ["-m", "loop"]
    replicas = [services["vllm-0"], services["vllm-1"]]
    for k, replica in enumerate(replicas):
        assert replica.command[1:] == ["-m", "modelsim"]
        assert replica.environment["SIM_GPU_IDS"] == str(k)  # the GPU it stands for
    router = services["vllm-router"].command
    assert router[router.index("--worker-urls") + 1 :] == [r.url for r in replicas]
    loop_env = services["loop"].environment
    assert loop_env["LOOP_MODEL_BASE_URL"] == f"{services['vllm-router'].url}/v1"
    assert loop_env["LOOP_MCP_URL"] == f"{services['mcp-server'].url}/mcp"


def test_the_seed_scenario_runs_through_the_compose_wiring(local_stack):
    services, _ = local_stack
    loop = services["loop"].url
    assert httpx.get(f"{loop}/readyz").json()["status"] == "ready"
    final, _ = stream_run(loop, "把我那張家庭旅遊的特休送出審核", None)
    assert final.status == "completed", final
    assert final.tools() == [
        "search_leaves",
        "update_leave_status",
    ]
    assert "送出審核" in (final.answer or "")


def test_stop_ends_exactly_the_started_processes(tmp_path):
    stack = LocalStack(tmp_path)
    assert stack.stop() == [] and stack.running() == []
