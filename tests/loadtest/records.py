"""Raw-log records as the Locust users write them, for tests of the summary and the cost maths."""

from __future__ import annotations

from typing import Any


def agent_record(start: float, run_ms: float) -> dict[str, Any]:
    """One successful agent run: a query of 3,000 prompt and 100 output tokens in two turns."""
    return {
        "kind": "agent",
        "name": "query",
        "start": start,
        "end": start + run_ms / 1000,
        "ok": True,
        "error": None,
        "prompt_tokens": 3000,
        "output_tokens": 100,
        "turns": 2,
        "tool_calls": 1,
        "first_answer_ms": 300.0,
        "run_ms": run_ms,
    }
