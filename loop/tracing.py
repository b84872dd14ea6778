"""The loop's spans, named after the OpenTelemetry GenAI semantic conventions.

A run is `invoke_agent leave-copilot`, a child of its HTTP request's span (FastAPI's own, which
continues the client's `traceparent` if it sent one). Inside it each model call is
`chat <model>` (its HTTP request carries the W3C `traceparent`, so vLLM's own span joins the
trace) and each tool call `execute_tool <tool>` (inside which the MCP SDK opens its
`MCP send tools/call <tool>` span and sends the trace context on to the MCP server). Where
spans go is common/tracing.py's business; with tracing off these are the OpenTelemetry API's
no-op spans.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, StatusCode

if TYPE_CHECKING:
    from .engine import ModelReply, RunResult

AGENT_NAME = "leave-copilot"
PROVIDER = "vllm"
tracer = trace.get_tracer("leave_loop")


@contextmanager
def run_span(run_id: str) -> Iterator[Span]:
    """The run's span; `run_finished` fills in how it ended."""
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": AGENT_NAME,
        "leave_loop.run.id": run_id,
    }
    with tracer.start_as_current_span(f"invoke_agent {AGENT_NAME}", attributes=attributes) as span:
        yield span


def run_finished(span: Span, result: RunResult, session_id: str) -> None:
    """`session_id` as the run ended up in (another user's id is replaced by a fresh one)."""
    if not span.is_recording():
        return
    span.set_attributes(
        {
            "gen_ai.conversation.id": session_id,
            "gen_ai.usage.input_tokens": result.prompt_tokens,
            "gen_ai.usage.output_tokens": result.completion_tokens,
            "leave_loop.status": str(result.status),
            "leave_loop.turns": result.turns,
        }
    )
    for detection in result.detections:
        span.add_event("detection", {"leave_loop.detection": detection})
    if result.status == "failed":
        span.set_attribute("error.type", result.reason.error_type if result.reason else "failed")
        span.set_status(StatusCode.ERROR, None if result.reason is None else str(result.reason))


@contextmanager
def chat_span(
    model: str, base_url: str, *, temperature: float, max_tokens: int | None
) -> Iterator[Span]:
    """One model call, retries included (each retry an event on it)."""
    server = urlsplit(base_url)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.request.model": model,
        "gen_ai.request.temperature": temperature,
        "server.address": server.hostname or "",
        "server.port": server.port or (443 if server.scheme == "https" else 80),
    }
    if max_tokens:
        attributes["gen_ai.request.max_tokens"] = max_tokens
    with tracer.start_as_current_span(
        f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes
    ) as span:
        try:
            yield span
        except Exception as error:
            span.set_attribute("error.type", type(error).__name__)
            raise


def chat_finished(span: Span, reply: ModelReply) -> None:
    if not span.is_recording():
        return
    span.set_attributes(
        {
            "gen_ai.usage.input_tokens": reply.prompt_tokens,
            "gen_ai.usage.output_tokens": reply.completion_tokens,
            "gen_ai.response.finish_reasons": [reply.finish_reason],
        }
    )
    if reply.response_id:
        span.set_attribute("gen_ai.response.id", reply.response_id)
    if reply.response_model:
        span.set_attribute("gen_ai.response.model", reply.response_model)


@contextmanager
def tool_span(name: str, call_id: str | None, *, verify: bool = False) -> Iterator[Span]:
    """One tool call (a `verify` one reads back what a timed-out write did)."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.type": "function",
    }
    if call_id:
        attributes["gen_ai.tool.call.id"] = call_id
    if verify:
        attributes["leave_loop.verify"] = True
    with tracer.start_as_current_span(f"execute_tool {name}", attributes=attributes) as span:
        yield span


def tool_finished(error: str | None) -> None:
    """How the current tool span's call ended: the outcome of its step if the step failed."""
    if error:
        span = trace.get_current_span()
        span.set_attribute("error.type", str(error))
        span.set_status(StatusCode.ERROR)
