"""The first error of its kind reaches Prometheus: a real one scrapes the real services, which
export every known label value at zero from the start, so a single refused write shows in the
Agent dashboard's error ratio and in the MCP server's refusal rate."""

from __future__ import annotations

from pathlib import Path

import httpx

from devtools import prometheus
from tests.support import free_port, loop_service, mcp_server, model_simulator, running, wait_until

from .helpers import tool

EMPLOYEE = {"Authorization": "Bearer demo-token-employee"}


def query(url: str, expression: str) -> list[dict]:
    body = httpx.get(f"{url}/api/v1/query", params={"query": expression}, timeout=10).json()
    assert body["status"] == "success", (expression, body)
    return body["data"]["result"]


def value(url: str, expression: str) -> float | None:
    found = query(url, expression)
    return float(found[0]["value"][1]) if found else None


def test_a_single_refused_write_shows_in_the_error_ratio_and_the_refusal_rate(tmp_path: Path):
    tool("prometheus")
    with (
        mcp_server(tmp_path) as mcp,
        model_simulator(tmp_path, profile="instant") as sim,
        loop_service(tmp_path, f"{sim}/v1", f"{mcp}/mcp") as (loop, _),
    ):
        hostport = {
            "vllm": sim.removeprefix("http://"),
            "loop": loop.removeprefix("http://"),
            "mcp-server": mcp.removeprefix("http://"),
        }
        listen = f"127.0.0.1:{free_port()}"
        config = prometheus.write_config(
            tmp_path / "prometheus.yml", prometheus.local_config(hostport, listen, "1s")
        )
        command = prometheus.command(config, tmp_path / "tsdb", listen)
        with running([], {}, tmp_path / "prometheus.log", f"http://{listen}/-/ready", argv=command):
            url = f"http://{listen}"
            with httpx.Client(base_url=loop, headers=EMPLOYEE, timeout=60) as http:
                # reads only, scraped twice before the error
                assert http.post("/v1/runs", json={"input": "查一下我的假單"}).status_code == 200
                wait_until(
                    lambda: (value(url, 'count_over_time(up{job="loop"}[1m])') or 0) >= 2,
                    timeout=30,
                    what="two scrapes of the loop",
                )
                # one write with a guessed id: the server refuses it, once
                http.post("/v1/runs", json={"input": "把家庭旅遊送出審核 [sim-fault:guessed_id]"})
            ratio = 'tool:leave_loop_tool_call_errors:ratio_rate1m{tool="update_leave_status"}'
            wait_until(
                lambda: (value(url, ratio) or 0) > 0,
                timeout=30,
                what="the refused write in the Agent dashboard's error ratio",
            )
            refusals = 'increase(leave_mcp_rule_refusals_total{rule="unknown_id"}[1m])'
            wait_until(
                lambda: (value(url, refusals) or 0) > 0,
                timeout=30,
                what="the refusal in the MCP server's refusal rate",
            )
