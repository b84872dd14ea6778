"""Prometheus metrics of the MCP server (own registry per app, so tests can build many)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from common.contract import ToolName

from .messages import TEMPLATES

# The label values each counter can take (tools.refused, tools.failed and run say which).
TOOL_OUTCOMES = ("ok", "refused", "declined", "error")
ELICITATION_OUTCOMES = ("accepted", "declined", "cancelled", "abandoned")
RULES = tuple(dict.fromkeys(rule for rule, _texts in TEMPLATES.values()))
# One label for every name that is no tool's: the names are the caller's, unbounded.
UNKNOWN_TOOL_LABEL = "unknown"

# Tool calls are single-digit milliseconds on loopback; cover 1 ms to 10 s.
TOOL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.tool_calls = Counter(
            "leave_mcp_tool_calls",
            "Tool calls by tool (unknown: a name no tool has) and outcome (ok, refused, declined, "
            "error).",
            ["tool", "outcome"],
            registry=self.registry,
        )
        self.tool_duration = Histogram(
            "leave_mcp_tool_duration_seconds",
            "Time spent inside a tool, from arguments to result.",
            ["tool"],
            buckets=TOOL_BUCKETS,
            registry=self.registry,
        )
        # A call that started and has not ended: a write waiting on a locked database shows
        # here long before its duration is observed.
        self.tool_calls_in_progress = Gauge(
            "leave_mcp_tool_calls_in_progress",
            "Tool calls started and not yet ended, by tool.",
            ["tool"],
            registry=self.registry,
        )
        self.elicitations = Counter(
            "leave_mcp_elicitations",
            "Human confirmations by outcome (accepted, declined, cancelled, abandoned).",
            ["outcome"],
            registry=self.registry,
        )
        self.rule_refusals = Counter(
            "leave_mcp_rule_refusals",
            "Business-rule refusals by rule (unknown_id, wrong_step, forbidden, conflict, ...).",
            ["rule"],
            registry=self.registry,
        )
        self.auth_failures = Counter(
            "leave_mcp_auth_failures",
            "Requests refused with HTTP 401, by reason (missing, invalid), or 403 for the person "
            "they name (acting_for: docs/identity.md).",
            ["reason"],
            registry=self.registry,
        )
        self._start_at_zero()

    def _start_at_zero(self) -> None:
        """Every known label value exported as 0 from the start. A child is otherwise born at
        its first observation, already holding 1, and rate()/increase() never see that first
        error: an alert on a rare one would never fire."""
        tools = [*ToolName, UNKNOWN_TOOL_LABEL]
        for tool in tools:
            for outcome in TOOL_OUTCOMES:
                self.tool_calls.labels(tool, outcome)
        for tool in ToolName:
            self.tool_duration.labels(tool)
            self.tool_calls_in_progress.labels(tool)
        for outcome in ELICITATION_OUTCOMES:
            self.elicitations.labels(outcome)
        for rule in RULES:
            self.rule_refusals.labels(rule)
        for reason in ("missing", "invalid", "acting_for"):
            self.auth_failures.labels(reason)
