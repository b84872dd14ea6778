"""Prometheus metrics of the loop service (own registry per app)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from common.contract import LeaveStatus, ToolName
from common.cost import CostSettings, CostSettingsCollector
from common.runs_protocol import ConfirmationOutcome, DetectionKind, RunStatus, ToolCallOutcome

# The label values each counter takes (runs.RunTools, the model client and the engine say which).
TOOL_OUTCOMES = tuple(ToolCallOutcome)
CONFIRMATION_OUTCOMES = tuple(ConfirmationOutcome)
DETECTIONS = tuple(DetectionKind)
# Retried model errors: any 5xx is retried, these are the ones vLLM and proxies answer with.
RETRY_REASONS = ("http_429", "timeout", "connection_error", "http_500", "http_502", "http_503")
RUN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
# A person reads a question and answers within seconds to the confirmation timeout (minutes).
WAIT_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)
CALL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class LoopMetrics:
    def __init__(self, model: str = "", revision: str = "") -> None:
        self.registry = r = CollectorRegistry()
        # which fine-tune answers: the dashboards tell an old one from a new one by it
        Gauge(
            "leave_loop_model_info",
            "The served model and its weights' revision (a constant 1).",
            ["model", "revision"],
            registry=r,
        ).labels(model or "unknown", revision or "unknown").set(1)
        self.runs = Counter("leave_loop_runs", "Finished runs by status.", ["status"], registry=r)
        # Wall time includes the minutes a person may take over a confirmation question; the
        # run-latency SLO judges the working time, which leaves that wait out.
        self.run_duration = Histogram(
            "leave_loop_run_duration_seconds",
            "Run wall time, including time spent waiting for a person to confirm.",
            buckets=RUN_BUCKETS,
            registry=r,
        )
        self.run_working = Histogram(
            "leave_loop_run_working_seconds",
            "Run time without the time spent waiting for a person to confirm (the SLO's).",
            buckets=RUN_BUCKETS,
            registry=r,
        )
        self.confirmation_wait = Histogram(
            "leave_loop_confirmation_wait_seconds",
            "Time from a confirmation question being asked to a person's answer (or timeout).",
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.turns = Histogram(
            "leave_loop_run_turns",
            "Model turns per run.",
            buckets=(1, 2, 3, 4, 5, 6, 8, 12, 16),
            registry=r,
        )
        self.model_duration = Histogram(
            "leave_loop_model_call_duration_seconds",
            "Model call duration (including retries).",
            buckets=CALL_BUCKETS,
            registry=r,
        )
        self.claims_unverified = Counter(
            "leave_loop_claims_unverified",
            "Finished runs whose answer claims a change (by the status claimed) that none of "
            "their own successful tool calls made (loop/claim_check.py).",
            ["claim"],
            registry=r,
        )
        self.tokens = Counter(
            "leave_loop_tokens",
            "Model tokens by type; prompt_repeated: the prompt tokens that repeat a prefix "
            "this run or session sent before (a share of prompt, what a prefix cache serves).",
            ["type"],
            registry=r,
        )
        self.tool_duration = Histogram(
            "leave_loop_tool_call_duration_seconds",
            "Tool call duration by tool and outcome.",
            ["tool", "outcome"],
            buckets=CALL_BUCKETS,
            registry=r,
        )
        self.confirmations = Counter(
            "leave_loop_confirmations", "Confirmations by outcome.", ["outcome"], registry=r
        )
        self.detections = Counter(
            "leave_loop_detections",
            "Model output problems detected (tool_call_in_content, length).",
            ["kind"],
            registry=r,
        )
        self.retries = Counter(
            "leave_loop_model_retries", "Model call retries by reason.", ["reason"], registry=r
        )
        self.in_flight = Gauge(
            "leave_loop_runs_in_flight",
            "Runs executing now (not those waiting for a person's answer).",
            registry=r,
        )
        r.register(CostSettingsCollector(CostSettings()))  # the price inputs of the cost rules
        self.mcp_connects = Counter(
            "leave_loop_mcp_connects", "MCP connections opened.", registry=r
        )
        self._start_at_zero()

    def _start_at_zero(self) -> None:
        """Every known label value exported as 0 from the start. A child is otherwise born at
        its first observation, already holding 1, and rate()/increase() never see that first
        error: the error-ratio panels show nothing and an alert on a rare error never fires."""
        for status in RunStatus:
            self.runs.labels(status)
        for kind in ("prompt", "prompt_repeated", "completion"):
            self.tokens.labels(kind)
        for kind in DETECTIONS:
            self.detections.labels(kind)
        for claimed in LeaveStatus:
            self.claims_unverified.labels(claimed)
        for tool in ToolName:
            for outcome in TOOL_OUTCOMES:
                self.tool_duration.labels(tool, outcome)
        for confirmed in CONFIRMATION_OUTCOMES:
            self.confirmations.labels(confirmed)
        for reason in RETRY_REASONS:
            self.retries.labels(reason)
