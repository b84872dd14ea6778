"""The faults the simulator can inject, by name (settings and the per-request header share them)."""

from __future__ import annotations

# Request-level faults answer before any generation; output faults rewrite what is generated.
REQUEST_FAULTS = frozenset({"http_500", "http_429", "stall"})
OUTPUT_FAULTS = frozenset(
    {
        "malformed_arguments",
        "unknown_tool",
        "tool_call_as_text",
        "guessed_id",
        "skip_step",
        "endless_tool_calls",
        "parallel_tool_calls",
    }
)
FAULTS = REQUEST_FAULTS | OUTPUT_FAULTS
