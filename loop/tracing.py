"""Trace records of finished runs, named after the OpenTelemetry GenAI semantic conventions.

One JSON line per span on the `loop.trace` logger: the run (`invoke_agent`), each model call
(`chat`) and each tool call (`execute_tool`), with the trace id shared and the parent named, so a
log pipeline can rebuild the tree or forward it to a tracing backend.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import secrets
from typing import Any

from .engine import RunResult

logger = logging.getLogger("loop.trace")
AGENT_NAME = "leave-copilot"


def spans(run_id: str, model_name: str, result: RunResult) -> list[dict[str, Any]]:
    trace_id = secrets.token_hex(16)
    root_id = secrets.token_hex(8)
    started = result.steps[0].started_at if result.steps else dt.datetime.now(dt.UTC).isoformat()
    total_ms = sum(s.duration_ms for s in result.steps)
    records = [
        {
            "trace_id": trace_id,
            "span_id": root_id,
            "parent_id": None,
            "name": f"invoke_agent {AGENT_NAME}",
            "start": started,
            "duration_ms": round(total_ms, 3),
            "attributes": {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": AGENT_NAME,
                "gen_ai.conversation.id": run_id,
                "gen_ai.usage.input_tokens": result.prompt_tokens,
                "gen_ai.usage.output_tokens": result.completion_tokens,
                "leave_loop.status": result.status,
                "leave_loop.turns": result.turns,
            },
        }
    ]
    for step in result.steps:
        if step.type == "model":
            name = f"chat {model_name}"
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "vllm",
                "gen_ai.request.model": model_name,
                "gen_ai.usage.input_tokens": step.prompt_tokens,
                "gen_ai.usage.output_tokens": step.completion_tokens,
            }
            if isinstance(step.result, dict):
                attributes["gen_ai.response.finish_reasons"] = [step.result.get("finish_reason")]
        elif step.type in ("tool", "verify"):
            name = f"execute_tool {step.name}"
            attributes = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": step.name,
                "gen_ai.tool.call.id": step.tool_call_id,
            }
        else:
            name = f"detection {step.name}"
            attributes = {}
        if step.error:
            attributes["error.type"] = step.error.split(":", 1)[0]
        records.append(
            {
                "trace_id": trace_id,
                "span_id": secrets.token_hex(8),
                "parent_id": root_id,
                "name": name,
                "start": step.started_at,
                "duration_ms": step.duration_ms,
                "attributes": attributes,
            }
        )
    return records


def log_run(run_id: str, model_name: str, result: RunResult) -> None:
    for record in spans(run_id, model_name, result):
        logger.info(json.dumps(record, ensure_ascii=False))
