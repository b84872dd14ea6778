"""A real Prometheus scrapes the real services under traffic; every query must return data.

The simulator (gpu profile, so latencies and GPU activity are not zero), the MCP server and
the loop run as processes; Prometheus runs with monitoring/'s own config (targets rewritten
to them, 1 s scrapes) and rules. The seed scenarios, a burst of concurrent runs, runs with
faults (a guessed ID, a tool call written as text) and a bad token go through the loop. Then
every dashboard expression (variables substituted as Grafana would), every recording rule's
output and every series an alert reads is queried through the HTTP API.
"""

from __future__ import annotations

import concurrent.futures
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devtools import prometheus
from devtools.demo import run_scenarios
from harness.router import vllm_router
from tests.support import free_port, loop_service, mcp_server, model_simulator, running, wait_until

from .helpers import Live, metric_names, panel_queries, rules, tool, variable_queries

EMPLOYEE = {"Authorization": "Bearer demo-token-employee"}


def traffic(loop: str) -> None:
    assert run_scenarios(loop), "a seed scenario did not go as expected"
    with httpx.Client(base_url=loop, headers=EMPLOYEE, timeout=60) as http:

        def run(text: str) -> int:
            return http.post("/v1/runs", json={"input": text}).status_code

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(run, ["查一下我的假單"] * 16))
        assert statuses == [200] * 16
        # a rule refusal, a detection, and a model error the router retries and gives up on
        for fault in ("guessed_id", "tool_call_as_text", "http_500"):
            http.post("/v1/runs", json={"input": f"把家庭旅遊送出審核 [sim-fault:{fault}]"})
    bad = httpx.post(
        f"{loop}/v1/runs",
        json={"input": "查一下我的假單"},
        headers={"Authorization": "Bearer not-a-real-token"},
        timeout=30,
    )
    assert bad.status_code == 401


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> Iterator[Live]:
    tool("prometheus")
    workdir: Path = tmp_path_factory.mktemp("monitoring")
    with (
        mcp_server(workdir) as mcp,
        model_simulator(workdir, profile="gpu", gpu_ids="0") as sim,
        model_simulator(workdir, profile="gpu", gpu_ids="1") as other,
        vllm_router(workdir, [sim, other]) as (router, router_metrics),
        loop_service(workdir, f"{router}/v1", f"{mcp}/mcp", model_retry_backoff_seconds="0.05") as (
            loop,
            _,
        ),
    ):
        hostport: dict[str, prometheus.Targets] = {
            "vllm": [
                (sim.removeprefix("http://"), {"replica": "vllm-0"}),
                (other.removeprefix("http://"), {"replica": "vllm-1"}),
            ],
            "vllm-router": router_metrics.removeprefix("http://").removesuffix("/metrics"),
            "loop": loop.removeprefix("http://"),
            "mcp-server": mcp.removeprefix("http://"),
        }
        listen = f"127.0.0.1:{free_port()}"
        config = prometheus.write_config(
            workdir / "prometheus.yml", prometheus.local_config(hostport, listen, "1s")
        )
        assert prometheus.check_config(config) == ""
        command = prometheus.command(config, workdir / "tsdb", listen)
        with running([], {}, workdir / "prometheus.log", f"http://{listen}/-/ready", argv=command):
            live = Live(f"http://{listen}", {"loop": loop, "mcp": mcp, "sim": sim})
            wait_until(lambda: len(live.query("up == 1")) == 6, timeout=30, what="six targets up")
            traffic(loop)
            # every run is counted by the loop; wait until Prometheus has scraped the last
            expected = float(
                sum(
                    float(line.split()[-1])
                    for line in httpx.get(f"{loop}/metrics").text.splitlines()
                    if line.startswith("leave_loop_runs_total")
                )
            )
            wait_until(
                lambda: (
                    float(
                        (live.query("sum(leave_loop_runs_total)") or [{"value": [0, "0"]}])[0][
                            "value"
                        ][1]
                    )
                    == expected
                ),
                timeout=30,
                what="the last runs scraped",
            )
            wait_until(  # the rules run every second; the cost rules need two points in 5 m
                lambda: bool(live.query(":leave_cost_api_usd_per_completed_run:rate5m")),
                timeout=30,
                what="the cost rules evaluated",
            )
            yield live


def figure(result: list[dict]) -> str:
    values = []
    for series in result[:3]:
        labels = {k: v for k, v in series["metric"].items() if k not in ("__name__", "job")}
        shown = ",".join(f"{k}={v}" for k, v in labels.items() if k != "instance")
        values.append(f"{shown or '·'}={float(series['value'][1]):.4g}")
    return "; ".join(values) + (" …" if len(result) > 3 else "")


def test_every_dashboard_query_returns_data(live):
    missing, shown = [], []
    for uid, title, expression in panel_queries():
        result = live.query(expression)
        if not result:
            missing.append(f"{uid} / {title}: {expression}")
        else:
            shown.append(f"  {uid:<22} {title[:44]:<44} {figure(result)}")
    print("\nevery panel query, with what it showed:\n" + "\n".join(shown))
    assert missing == [], "queries without data:\n" + "\n".join(missing)


def test_every_dashboard_variable_has_values(live):
    for uid, name, query in variable_queries():
        metric, label = query.removeprefix("label_values(").removesuffix(")").split(", ")
        values = httpx.get(
            f"{live.url}/api/v1/label/{label}/values", params={"match[]": metric}, timeout=10
        ).json()["data"]
        assert values, (uid, name)


def test_every_recording_rule_produces_series(live):
    missing, shown = [], []
    for rule in rules():
        if "record" in rule:
            result = live.query(rule["record"])
            if result:
                shown.append(f"  {rule['record']:<66} {figure(result)}")
            else:
                missing.append(rule["record"])
    print("\nevery recording rule, with its value:\n" + "\n".join(shown))
    assert missing == []


def test_every_series_an_alert_reads_exists_and_its_expression_evaluates(live):
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    for rule in rules():
        if "alert" not in rule:
            continue
        live.query(rule["expr"])  # evaluates without error (firing or not)
        names = metric_names(rule["expr"]) | (
            {"up"} if "up" in rule["expr"].replace("(", " ").split() else set()
        )
        for name in names - {n for n in names if any(n in r for r in recorded)}:
            assert live.query(f"count({{__name__=~'{name}.*'}})"), (rule["alert"], name)
        for name in {r for r in recorded if r in rule["expr"]}:
            assert live.query(name), (rule["alert"], name)


def test_promtool_check_metrics_is_clean_on_every_service(live):
    promtool = tool("promtool")
    for name, base in live.services.items():
        page = httpx.get(f"{base}/metrics", timeout=10).text
        done = subprocess.run(
            [promtool, "check", "metrics"], input=page, capture_output=True, text=True
        )
        problems = [
            line
            for line in (done.stdout + done.stderr).splitlines()
            # vLLM's own names carry a colon, which the linter flags for every exporter
            # that keeps them; our names and the DCGM ones must be clean
            if line.strip() and "vllm:" not in line and not dcgm_contract_label(line)
        ]
        assert problems == [], f"{name}:\n" + "\n".join(problems)


def dcgm_contract_label(line: str) -> bool:
    return line.startswith("DCGM_FI_") and "label names should be written in 'snake_case'" in line


def test_the_cost_rules_agree_with_the_cost_module(live):
    from common.cost import CostSettings, self_hosted_usd_per_million_tokens

    (rule,) = [
        r
        for r in rules()
        if r.get("record") == ":leave_cost_self_hosted_usd_per_million_generated_tokens:rate5m"
    ]
    # both at one moment far enough back that every scrape before it is stored: the rule's own
    # evaluation can run before a scrape stamped earlier has been written (two replicas are
    # scraped apart), so its recorded sample is not always what the same data gives later
    at = time.time() - 5
    value = float(live.query(rule["expr"], at=at)[0]["value"][1])
    rate = float(live.query("sum(rate(vllm:generation_tokens_total[5m]))", at=at)[0]["value"][1])
    settings = CostSettings()
    expected = self_hosted_usd_per_million_tokens(settings.gpu_hourly_usd, rate)
    assert value == pytest.approx(expected, rel=1e-9)
    assert live.query(rule["record"]), "and the rule records it"


def test_the_api_cost_rule_prices_repeated_prompt_tokens_at_the_cached_price(live):
    """The API $ a run of the cost rule is common.cost.api_usd_per_run on the same rates: the
    prompt tokens the loop counted as repeating a prefix at the cached-input price."""
    from common.cost import CostSettings, api_usd_per_run

    (rule,) = [
        r for r in rules() if r.get("record") == ":leave_cost_api_usd_per_completed_run:rate5m"
    ]
    at = time.time() - 5  # see test_the_cost_rules_agree_with_the_cost_module

    def rate(selector: str) -> float:
        return float(live.query(f"sum(rate({selector}[5m]))", at=at)[0]["value"][1])

    prompt = rate('leave_loop_tokens_total{type="prompt"}')
    repeated = rate('leave_loop_tokens_total{type="prompt_repeated"}')
    completion = rate('leave_loop_tokens_total{type="completion"}')
    runs = rate('leave_loop_runs_total{status="completed"}')
    # the scenarios' runs take two or more model calls: most of their prompt repeats
    assert 0 < repeated < prompt
    value = float(live.query(rule["expr"], at=at)[0]["value"][1])
    expected = api_usd_per_run(prompt / runs, completion / runs, CostSettings(), repeated / runs)
    assert value == pytest.approx(expected, rel=1e-9)
    assert value < api_usd_per_run(prompt / runs, completion / runs, CostSettings())
