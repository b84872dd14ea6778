"""The whole path on the real local stack: a short headless Locust run of agent, facade and
model users against the simulator, the seeded MCP server and the loop (processes on free
ports), then the cost calculator as a process on the summary it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadtest.cost.inputs import CAPACITY_FIELDS
from loadtest.summary import LoadSummary
from tests.support import REPO_ROOT, loop_service, mcp_server, model_simulator

LOAD_SECONDS = 8


def run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    # the runner's own LOAD_*/COST_* variables must not change what is measured or priced
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOAD_", "COST_"))}
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=REPO_ROOT,
        env=env | {"LOAD_PROMETHEUS_URL": "off"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.timeout(120)
def test_load_test_on_the_local_stack_feeds_the_cost_calculator(tmp_path: Path):
    began = time.monotonic()
    with (
        mcp_server(tmp_path) as mcp,
        model_simulator(tmp_path, profile="instant") as sim,
        loop_service(tmp_path, f"{sim}/v1", f"{mcp}/mcp") as (loop, _),
    ):
        load = run(
            [
                *("loadtest", "--loop-url", loop, "--model-url", f"{sim}/v1"),
                *("--mcp-url", f"{mcp}/mcp", "--shape", "constant"),
                *("--user-classes", "agent,facade,model", "--users", "3"),
                *("--duration-seconds", str(LOAD_SECONDS), "--results-dir", str(tmp_path / "r")),
                # think time keeps three users from saturating two shared cores
                *("--think-seconds", "0.3", "--model-think-seconds", "0.3"),
                *("--max-tokens", "32"),
                # this test is about the plumbing; the machine's speed is not under test
                *("--slo-ttft-p99-ms", "5000", "--slo-itl-p99-ms", "1000"),
            ],
            timeout=90,
        )
    loaded = time.monotonic() - began
    assert load.returncode == 0, load.stdout[-3000:] + load.stderr[-3000:]
    (summary_path,) = (tmp_path / "r").glob("*/summary.json")
    summary = LoadSummary.read(summary_path).as_json()
    (step,) = summary["steps"]
    assert step["errors"] == 0, step["error_examples"]
    assert step["slo_met"], step["slo_broken"]
    agent, facade, model = step["agent"], step["facade"], step["model"]
    assert agent["runs_per_s"] > 0 and agent["turns_per_run"] >= 2
    assert agent["tool_calls_per_run"] >= 1 and agent["output_tokens_per_run"] > 0
    assert facade["runs_per_s"] > 0 and facade["output_tokens_per_run"] > 0
    assert facade["first_answer_ms"]["p50"] <= facade["run_ms"]["p50"]
    assert model["requests_per_s"] > 0 and model["output_tokens_per_s"] > 0
    # a run that asked its person has the client's time over the question apart from its own
    raw = [
        json.loads(line)
        for path in summary_path.parent.glob("raw-*.jsonl")
        for line in path.read_text().splitlines()
    ]
    for record in (r for r in raw if r["kind"] == "agent" and r["ok"]):
        waited = record["confirmation_wait_ms"]
        assert (0 < waited < record["run_ms"]) if record["confirmations"] else waited == 0
    if any(r.get("confirmations") for r in raw if r["kind"] == "agent" and r["ok"]):
        assert agent["run_wall_ms"]["p95"] >= agent["run_ms"]["p95"]
    capacity = summary["capacity_at_slo"]
    assert set(CAPACITY_FIELDS) <= set(capacity)
    assert capacity["runs_per_s"] == agent["runs_per_s"]
    assert capacity["facade_runs_per_s"] == facade["runs_per_s"]
    assert capacity["prompt_tokens_per_run"] > capacity["output_tokens_per_run"] > 0
    # the prompt records: every finished run's model calls, each later one resending the
    # earlier, so most of the prompt tokens repeat a prefix but never all of them
    prefix = agent["prompt_prefix"]
    assert prefix["calls"] == pytest.approx(agent["turns_per_run"] * prefix["runs"])
    assert prefix["prompt_tokens"] == pytest.approx(agent["prompt_tokens_per_run"] * prefix["runs"])
    assert 0.5 < prefix["repeated_tokens"] / prefix["prompt_tokens"] < 1

    cost = run(
        ["loadtest.cost", str(summary_path), "--settings", "loadtest/cost.example.toml"],
        timeout=60,
    )
    assert cost.returncode == 0, cost.stdout[-3000:] + cost.stderr[-3000:]
    report = json.loads((summary_path.parent / "cost.json").read_text())
    print(f"stack up + load test: {loaded:.1f} s, total {time.monotonic() - began:.1f} s")
    assert report["break_even"]["without_hidden_costs"]["requests_per_day"] > 0
    # the API's cached share is measured from those records, and the top of the report says so
    assert "measured from the load test's prompts" in report["headline"][0]
    assert report["api"]["cached_share_how"].startswith(
        f"{report['api']['cached_input_tokens_per_request']:,.0f} of "
    )
    # what served the load, as the simulator said it: and the report says so
    assert summary["backend"]["kind"] == "simulator" and summary["backend"]["simulated"]
    assert summary["backend"]["models"] == ["leave-copilot"]
    assert report["banner"].startswith("SIMULATED BACKEND — not a GPU measurement")
