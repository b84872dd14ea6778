"""Writes the Grafana dashboards (monitoring/grafana/dashboards/*.json) from this description.

`python monitoring/grafana/build_dashboards.py` after a change; a test fails while the
committed JSON differs from what this writes. The panels are built with Grafana's own
Foundation SDK, whose types are generated from Grafana's dashboard schema, so what comes out
is a dashboard Grafana's schema accepts. Queries use the recording rules where one exists
(monitoring/prometheus/rules/recording.yml), so a dashboard and an alert read the same series.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common, dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import BigValueColorMode
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    GridPos,
    ThresholdsMode,
    ValueMap,
    ValueMappingResult,
    VariableRefresh,
)
from grafana_foundation_sdk.models.dashboard import Threshold as ThresholdStep

from common import slo

DATASOURCE = DataSourceRef(type_val="prometheus", uid="leave-copilot-prometheus")
OUT = Path(__file__).resolve().parent / "dashboards"
TAGS = ["leave-copilot"]
MODEL = '{model_name="$model"}'


@dataclass
class Query:
    expr: str
    legend: str = ""


@dataclass
class Panel:
    title: str
    queries: list[Query]
    unit: str = "short"
    kind: str = "timeseries"  # or "stat"
    description: str = ""
    thresholds: list[tuple[float, str]] = field(default_factory=list)  # (from value, colour)
    width: int = 12
    mappings: dict[str, tuple[str, str]] = field(default_factory=dict)  # value → (text, colour)


@dataclass
class Board:
    uid: str
    title: str
    description: str
    panels: list[Panel]
    variables: list[tuple[str, str]] = field(default_factory=list)  # (name, label_values query)


def _percentiles(metric: str, what: str) -> list[Query]:
    return [Query(f"{metric.format(q=q)}{MODEL}", f"{what} p{q}") for q in (50, 95, 99)]


SERVING = Board(
    "leave-copilot-serving",
    "leave-copilot · Serving (vLLM)",
    "vLLM's own metrics: latency, throughput, the scheduler and the KV cache.",
    variables=[("model", "label_values(vllm:num_requests_running, model_name)")],
    panels=[
        Panel(
            "Which fine-tune serves",
            [
                Query(
                    # the last promote's record when there is one, else what the loop was
                    # started with (`or on()` takes the right side only when the left is empty)
                    'max by (model, revision) (up{job="vllm-serving"}) '
                    "or on() max by (model, revision) (leave_loop_model_info)",
                    "{{model}} {{revision}}",
                )
            ],
            kind="stat",
            width=24,
            description="The served model and its weights' revision: the replicas the last "
            "`make promote`/`make rollback` put into the router's rotation (their vLLM root, "
            "or the revision named; 0 when none answers), else VLLM_MODEL_REVISION or the "
            "fingerprint `make up` computes. docs/evaluation.md#promote-and-rollback",
        ),
        Panel(
            "Requests finished / s by reason",
            [
                Query(
                    "sum by (finished_reason) "
                    f"(rate(vllm:request_success_total{MODEL}[$__rate_interval]))",
                    "{{finished_reason}}",
                )
            ],
            unit="reqps",
        ),
        Panel(
            "Time to first token",
            _percentiles("model_name:vllm_time_to_first_token_seconds:p{q}_rate1m", "TTFT"),
            unit="s",
            thresholds=[(0, "green"), (slo.TTFT_P99_SECONDS, "red")],
            description=f"SLO line at p99 ≤ {slo.TTFT_P99_SECONDS * 1000:g} ms (common/slo.py): "
            "the load tests' verdict and the TimeToFirstTokenOverSLO alert's threshold.",
        ),
        Panel(
            "Inter-token latency",
            _percentiles("model_name:vllm_inter_token_latency_seconds:p{q}_rate1m", "ITL"),
            unit="s",
        ),
        Panel(
            "End-to-end request latency",
            _percentiles("model_name:vllm_e2e_request_latency_seconds:p{q}_rate1m", "e2e"),
            unit="s",
        ),
        Panel(
            "Tokens / s",
            [
                Query(f"model_name:vllm_prompt_tokens:rate1m{MODEL}", "prompt (in)"),
                Query(f"model_name:vllm_generation_tokens:rate1m{MODEL}", "generated (out)"),
            ],
            unit="short",
        ),
        Panel(
            "Requests running and waiting",
            [
                Query(f"model_name:vllm_num_requests_running:sum{MODEL}", "running"),
                Query(f"model_name:vllm_num_requests_waiting:sum{MODEL}", "waiting"),
            ],
        ),
        Panel(
            "KV-cache usage",
            [Query(f"model_name:vllm_kv_cache_usage_perc:max{MODEL}", "used")],
            unit="percentunit",
            thresholds=[(0, "green"), (0.8, "orange"), (0.9, "red")],
        ),
        Panel(
            "Mean queue time and preemptions / s",
            [
                # a mean, not a quantile: vLLM's smallest queue-time bucket is 0.3 s, so a
                # quantile of short waits reads ~0.3 s when nothing waited at all
                Query(
                    f"sum(rate(vllm:request_queue_time_seconds_sum{MODEL}[$__rate_interval])) / "
                    f"sum(rate(vllm:request_queue_time_seconds_count{MODEL}[$__rate_interval]))",
                    "mean queue time (s)",
                ),
                Query(
                    f"sum(rate(vllm:num_preemptions_total{MODEL}[$__rate_interval]))",
                    "preemptions / s",
                ),
            ],
        ),
        Panel(
            "HTTP responses / s by status",
            [
                Query(
                    'sum by (status) (rate(http_requests_total{job="vllm"}[$__rate_interval]))',
                    "{{status}}",
                )
            ],
            unit="reqps",
            description="4xx and 5xx are errors seen by clients of the model server.",
        ),
    ],
)

AGENT = Board(
    "leave-copilot-agent",
    "leave-copilot · Agent loop",
    "The loop service and the leave MCP server: runs, turns, tools, confirmations, rules.",
    panels=[
        Panel(
            "Runs / s by status",
            [Query("status:leave_loop_runs:rate1m", "{{status}}")],
            unit="reqps",
        ),
        Panel(
            "Run latency",
            [Query(f":leave_loop_run_working_seconds:p{q}_rate1m", f"p{q}") for q in (50, 95, 99)],
            unit="s",
            thresholds=[(0, "green"), (slo.RUN_P95_SECONDS, "red")],
            description=f"Working time: a run's time without the time a person took to answer "
            f"its confirmation questions. SLO line at p95 ≤ {slo.RUN_P95_SECONDS:g} s "
            "(common/slo.py): the load tests' verdict and the AgentRunLatencyOverSLO alert's "
            "threshold.",
        ),
        Panel(
            "Turns and tokens per run",
            [
                Query(":leave_loop_run_turns:mean_rate1m", "model turns"),
                Query(
                    "sum by (type) (rate(leave_loop_tokens_total[$__rate_interval])) / "
                    "scalar(sum(rate(leave_loop_runs_total[$__rate_interval])))",
                    "{{type}} tokens",
                ),
            ],
        ),
        Panel(
            "Runs in flight",
            [Query("sum(leave_loop_runs_in_flight)", "runs")],
        ),
        Panel(
            "Tool calls / s by tool",
            [Query("tool:leave_loop_tool_calls:rate1m", "{{tool}}")],
            unit="reqps",
        ),
        Panel(
            "Tool-call latency p95 by tool",
            [Query("tool:leave_loop_tool_call_duration_seconds:p95_rate1m", "{{tool}}")],
            unit="s",
        ),
        Panel(
            "Tool-call error ratio by tool",
            [Query("tool:leave_loop_tool_call_errors:ratio_rate1m", "{{tool}}")],
            unit="percentunit",
            thresholds=[(0, "green"), (0.05, "orange"), (0.2, "red")],
        ),
        Panel(
            "Confirmations / s by outcome",
            [Query("outcome:leave_loop_confirmations:rate1m", "{{outcome}}")],
            unit="reqps",
        ),
        Panel(
            "Waiting for a person",
            [
                Query(":leave_loop_confirmation_wait_seconds:p50_rate5m", "answer p50"),
                Query(":leave_loop_confirmation_wait_seconds:p95_rate5m", "answer p95"),
                Query(":leave_loop_run_duration_seconds:p95_rate1m", "run wall time p95"),
            ],
            unit="s",
            description="How long people take to answer a confirmation question, and runs' "
            "wall time with those waits in (not the SLO's: see Run latency).",
        ),
        Panel(
            "Detections (model output problems) in the range",
            [
                Query(
                    "sum by (kind) (increase(leave_loop_detections_total[$__range]))",
                    "{{kind}}",
                )
            ],
            kind="stat",
            thresholds=[(0, "green"), (1, "red")],
            description="tool_call_in_content: a tool call written as text (parser setting).",
        ),
        Panel(
            "Answers claiming a change no tool call made, in the range",
            [
                Query(
                    "sum by (claim) (increase(leave_loop_claims_unverified_total[$__range]))",
                    "{{claim}}",
                )
            ],
            kind="stat",
            thresholds=[(0, "green"), (1, "red")],
            description="Runs flagged claims_unverified: told a person a leave was submitted, "
            "approved, cancelled… with no such successful call (alert AnswerClaimsUnmadeChange).",
        ),
        Panel(
            "MCP rule refusals / s by rule",
            [Query("rule:leave_mcp_rule_refusals:rate5m", "{{rule}}")],
            unit="reqps",
            description="Guessed IDs and skipped steps: the fine-tune breaking the rules.",
        ),
        Panel(
            "Authentication failures / s",
            [
                Query(
                    "sum by (reason) (rate(leave_mcp_auth_failures_total[$__rate_interval]))",
                    "{{reason}}",
                )
            ],
            unit="reqps",
        ),
        Panel(
            "MCP tool calls in progress by tool",
            [Query("sum by (tool) (leave_mcp_tool_calls_in_progress)", "{{tool}}")],
            description="Started and not yet ended: a write waiting on a locked database "
            "stays here while its latency has not been observed yet.",
        ),
    ],
)

REPLICA = '{replica=~"$replica"}'
REPLICAS = Board(
    "leave-copilot-replicas",
    "leave-copilot · Replicas and router",
    "Each vLLM replica (vllm-0 …) on its own, and vllm-router in front of them: a replica "
    "that runs hot while the others idle, one out of rotation, what the router retried.",
    variables=[("replica", "label_values(vllm:num_requests_running, replica)")],
    panels=[
        Panel(
            "Requests waiting by replica",
            [Query(f"replica:vllm_num_requests_waiting:sum{REPLICA}", "{{replica}}")],
            description="A queue on one replica only: its sessions outgrow it (the hash keeps "
            "them there), or the others are out of rotation.",
        ),
        Panel(
            "Requests running by replica",
            [Query(f"replica:vllm_num_requests_running:sum{REPLICA}", "{{replica}}")],
        ),
        Panel(
            "KV-cache usage by replica",
            [Query(f"replica:vllm_kv_cache_usage_perc:max{REPLICA}", "{{replica}}")],
            unit="percentunit",
            thresholds=[(0, "green"), (0.8, "orange"), (0.9, "red")],
        ),
        Panel(
            "Time to first token p95 by replica",
            [Query(f"replica:vllm_time_to_first_token_seconds:p95_rate1m{REPLICA}", "{{replica}}")],
            unit="s",
        ),
        Panel(
            "Prefix-cache hit rate by replica",
            [Query(f"replica:vllm_prefix_cache_hits:ratio_rate1m{REPLICA}", "{{replica}}")],
            unit="percentunit",
            description="Share of prompt tokens served from the replica's prefix cache: with "
            "consistent_hash a session's later turns mostly hit.",
        ),
        Panel(
            "GPU busy by replica (GR engine active)",
            [Query(f"replica:dcgm_gr_engine_active:avg1m{REPLICA}", "{{replica}}")],
            unit="percentunit",
        ),
        Panel(
            "Router: requests / s by replica",
            [Query("worker:vllm_router_processed_requests:rate1m", "{{worker}}")],
            unit="reqps",
            description="The load the router puts on each replica.",
        ),
        Panel(
            "Router: retries and failed calls / s",
            [
                Query("sum(rate(vllm_router_retries_total[$__rate_interval]))", "retries"),
                Query(
                    "sum(rate(vllm_router_retries_exhausted_total[$__rate_interval]))",
                    "retries exhausted (the client got an error)",
                ),
                Query(
                    'sum by (worker) (rate(vllm_router_cb_outcomes_total{outcome="failure"}'
                    "[$__rate_interval]))",
                    "failed calls {{worker}}",
                ),
            ],
            unit="reqps",
        ),
        Panel(
            "Router: circuit by replica",
            [Query("max by (worker) (vllm_router_cb_state)", "{{worker}}")],
            kind="stat",
            mappings={
                "0": ("closed (in rotation)", "green"),
                "1": ("OPEN: out of rotation", "red"),
                "2": ("half-open: being tried", "orange"),
            },
        ),
        Panel(
            "Router: replicas in rotation",
            [
                Query("sum(vllm_router_worker_health)", "healthy"),
                Query("max(vllm_router_active_workers)", "configured"),
            ],
            description="Below `configured`: a replica fails the router's health checks.",
        ),
    ],
)

GPU_FILTER = '{gpu=~"$gpu"}'
GPU = Board(
    "leave-copilot-gpu",
    "leave-copilot · GPU",
    "dcgm-exporter's fields for the GPUs that serve, each labelled with its replica. Without a "
    "GPU the simulator exports them, marked simulated.",
    variables=[("gpu", "label_values(DCGM_FI_DEV_FB_USED, gpu)")],
    panels=[
        Panel(
            "Source of these figures",
            [Query('count(DCGM_FI_DEV_FB_USED{simulated="true"}) or vector(0)', "")],
            kind="stat",
            width=24,
            mappings={
                "0": ("a real GPU (dcgm-exporter)", "green"),
                "1": ("SIMULATED: derived from the simulator's load model", "red"),
            },
        ),
        Panel(
            "Activity (profiling fields)",
            [
                Query(
                    f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{GPU_FILTER}",
                    "GR engine active {{replica}} GPU {{gpu}}",
                ),
                Query(f"DCGM_FI_PROF_SM_ACTIVE{GPU_FILTER}", "SM active {{replica}} GPU {{gpu}}"),
                Query(
                    f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{GPU_FILTER}",
                    "tensor active {{replica}} GPU {{gpu}}",
                ),
            ],
            unit="percentunit",
            description="GPU_UTIL reads ~100 % whenever a kernel runs; these say how busy.",
        ),
        Panel(
            "GPU_UTIL (coarse)",
            [Query(f"DCGM_FI_DEV_GPU_UTIL{GPU_FILTER}", "{{replica}} GPU {{gpu}}")],
            unit="percent",
        ),
        Panel(
            "Framebuffer memory",
            [
                Query(f"DCGM_FI_DEV_FB_USED{GPU_FILTER}", "used {{replica}} GPU {{gpu}}"),
                Query(f"DCGM_FI_DEV_FB_FREE{GPU_FILTER}", "free {{replica}} GPU {{gpu}}"),
            ],
            unit="mbytes",
            description="vLLM takes --gpu-memory-utilization of it at start, load or not.",
        ),
        Panel(
            "Power",
            [Query(f"DCGM_FI_DEV_POWER_USAGE{GPU_FILTER}", "{{replica}} GPU {{gpu}}")],
            unit="watt",
        ),
        Panel(
            "SM clock",
            [Query(f"DCGM_FI_DEV_SM_CLOCK{GPU_FILTER}", "{{replica}} GPU {{gpu}}")],
            unit="rotmhz",
        ),
        Panel(
            "Temperature",
            [Query(f"DCGM_FI_DEV_GPU_TEMP{GPU_FILTER}", "{{replica}} GPU {{gpu}}")],
            unit="celsius",
            thresholds=[(0, "green"), (80, "orange"), (87, "red")],
        ),
        Panel(
            "Last XID error by GPU",
            [
                Query(
                    f"max by (replica, gpu) (DCGM_FI_DEV_XID_ERRORS{GPU_FILTER})",
                    "{{replica}} GPU {{gpu}}",
                )
            ],
            kind="stat",
            thresholds=[(0, "green"), (1, "red")],
            description="0: no fault since the driver loaded; else the XID code (GpuXidError).",
        ),
        Panel(
            "ECC errors in the range",
            [
                Query(
                    f"sum by (replica, gpu) (increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{GPU_FILTER}"
                    "[$__range]))",
                    "uncorrectable {{replica}} GPU {{gpu}}",
                ),
                Query(
                    f"sum by (replica, gpu) (increase(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{GPU_FILTER}"
                    "[$__range]))",
                    "corrected {{replica}} GPU {{gpu}}",
                ),
            ],
            kind="stat",
            thresholds=[(0, "green"), (1, "red")],
        ),
        Panel(
            "Time throttled (power, heat)",
            [
                Query(
                    f"rate(DCGM_FI_DEV_POWER_VIOLATION{GPU_FILTER}[$__rate_interval]) / 1e6",
                    "power {{replica}} GPU {{gpu}}",
                ),
                Query(
                    f"rate(DCGM_FI_DEV_THERMAL_VIOLATION{GPU_FILTER}[$__rate_interval]) / 1e6",
                    "heat {{replica}} GPU {{gpu}}",
                ),
            ],
            unit="percentunit",
            description="Share of time the clocks were held down (GpuThrottled above 10 %).",
        ),
    ],
)

COST = Board(
    "leave-copilot-cost",
    "leave-copilot · Cost",
    "Live cost from the measured rates and the price settings (COST_* in deploy/.env): the "
    "formulas of common/cost.py, which the cost calculator uses too.",
    panels=[
        Panel(
            "Self-hosted $ per 1M generated tokens",
            [
                Query(
                    ":leave_cost_self_hosted_usd_per_million_generated_tokens:rate5m", "self-hosted"
                )
            ],
            kind="stat",
            unit="currencyUSD",
            width=8,
            description="GPU $/h ÷ generated tokens/h; idle time raises it.",
        ),
        Panel(
            "Self-hosted $ per completed run",
            [Query(":leave_cost_self_hosted_usd_per_completed_run:rate5m", "self-hosted")],
            kind="stat",
            unit="currencyUSD",
            width=8,
        ),
        Panel(
            "Commercial API $ per completed run",
            [Query(":leave_cost_api_usd_per_completed_run:rate5m", "API list price")],
            kind="stat",
            unit="currencyUSD",
            width=8,
            description=(
                "The same runs' tokens at the API's list prices: the prompt tokens that repeat "
                "a prefix at the cached-input price, the rest at the input price."
            ),
        ),
        Panel(
            "$ per completed run over time",
            [
                Query(":leave_cost_self_hosted_usd_per_completed_run:rate5m", "self-hosted"),
                Query(":leave_cost_api_usd_per_completed_run:rate5m", "commercial API"),
            ],
            unit="currencyUSD",
        ),
        Panel(
            "Break-even completed runs per day",
            [
                Query(
                    "max(leave_cost_gpu_hourly_usd) * 24 / "
                    ":leave_cost_api_usd_per_completed_run:rate5m",
                    "runs/day where self-hosting costs what the API would",
                )
            ],
            description="(GPU $/h × 24) ÷ API $ per run. Below it the API is cheaper.",
        ),
        Panel(
            "Prompt tokens that repeat a prefix",
            [Query(":leave_loop_prompt_repeated_share:rate5m", "repeated (API cached input)")],
            unit="percentunit",
            description=(
                "Of the prompt tokens the loop sent, those repeating a prefix sent before in the "
                "run or session: the share an API bills at its cached-input price."
            ),
        ),
        Panel(
            "GPU busy and idle share",
            [
                Query(":dcgm_gpu_busy:avg1m", "busy (GR engine active)"),
                Query("1 - avg_over_time(:dcgm_gpu_busy:avg1m[$__range])", "idle share, range"),
            ],
            unit="percentunit",
        ),
        Panel(
            "Price settings",
            [
                Query("max(leave_cost_gpu_hourly_usd)", "GPU host $/h"),
                Query("max(leave_cost_api_input_usd_per_million_tokens)", "API $/1M in"),
                Query(
                    "max(leave_cost_api_cached_input_usd_per_million_tokens)", "API $/1M cached in"
                ),
                Query("max(leave_cost_api_output_usd_per_million_tokens)", "API $/1M out"),
            ],
            kind="stat",
            unit="currencyUSD",
            width=24,
        ),
    ],
)

BOARDS = {
    "serving": SERVING,
    "replicas": REPLICAS,
    "agent-loop": AGENT,
    "gpu": GPU,
    "cost": COST,
}


def _panel(spec: Panel, position: tuple[int, int]) -> Any:
    builder = (
        stat.Panel() if spec.kind == "stat" else timeseries.Panel().line_width(1).fill_opacity(10)
    )
    builder = (
        builder.title(spec.title)
        .datasource(DATASOURCE)
        .unit(spec.unit)
        .grid_pos(GridPos(h=8, w=spec.width, x=position[0], y=position[1]))
    )
    if spec.description:
        builder = builder.description(spec.description)
    for ref, query in zip("ABCDEFGH", spec.queries, strict=False):
        target = prometheus.Dataquery().expr(query.expr).ref_id(ref).datasource(DATASOURCE)
        if query.legend:
            target = target.legend_format(query.legend)
        builder = builder.with_target(target)
    if spec.thresholds:
        steps = [ThresholdStep(value=None if i == 0 else v, color=c) for i, (v, c) in
                 enumerate(spec.thresholds)]  # fmt: skip
        builder = builder.thresholds(
            dashboard.ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps(steps)
        )
    if spec.mappings:
        builder = builder.mappings(
            [
                ValueMap(
                    options={
                        value: ValueMappingResult(text=text, color=colour, index=i)
                        for i, (value, (text, colour)) in enumerate(spec.mappings.items())
                    }
                )
            ]
        )
        if isinstance(builder, stat.Panel):
            builder = builder.color_mode(BigValueColorMode.BACKGROUND)
    if isinstance(builder, stat.Panel):
        builder = builder.reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]))
    return builder


def build(board: Board) -> dict[str, Any]:
    builder = (
        dashboard.Dashboard(board.title)
        .uid(board.uid)
        .description(board.description)
        .tags(TAGS)
        .refresh("10s")
        .time("now-30m", "now")
        .timezone("browser")
        .editable()
    )
    for name, query in board.variables:
        builder = builder.with_variable(
            dashboard.QueryVariable(name)
            .label(name)
            .datasource(DATASOURCE)
            .query(query)
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        )
    x = y = 0
    for spec in board.panels:
        if x + spec.width > 24:
            x, y = 0, y + 8
        builder = builder.with_panel(_panel(spec, (x, y)))
        x += spec.width
    built: dict[str, Any] = json.loads(json.dumps(builder.build(), cls=JSONEncoder))
    return built


def render(board: Board) -> str:
    return json.dumps(build(board), indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def main() -> int:
    OUT.mkdir(exist_ok=True)
    for name, board in BOARDS.items():
        (OUT / f"{name}.json").write_text(render(board))
        print(f"wrote {OUT.name}/{name}.json ({len(board.panels)} panels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
