"""Prometheus metrics of the MCP server (own registry per app, so tests can build many)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Tool calls are single-digit milliseconds on loopback; cover 1 ms to 10 s.
TOOL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.tool_calls = Counter(
            "leave_mcp_tool_calls",
            "Tool calls by tool and outcome (ok, refused, declined, error).",
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
            "Human confirmations by outcome (accepted, declined, cancelled).",
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
            "Requests refused with HTTP 401, by reason (missing, invalid).",
            ["reason"],
            registry=self.registry,
        )
        for reason in ("missing", "invalid"):  # zero from the start, so rates have a base
            self.auth_failures.labels(reason)
