"""The simulator's span per request, as vLLM's `--otlp-traces-endpoint` gives one: `llm_request`
(kind SERVER), a child of the request's W3C `traceparent`, with vLLM's attribute names
(`gen_ai.usage.prompt_tokens`, `gen_ai.latency.*` …), so a trace through the simulator has the
shape a trace through vLLM has. Made only when the simulator exports traces."""

from __future__ import annotations

import time
from collections.abc import Mapping

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind

SPAN_NAME = "llm_request"  # vLLM's
tracer = trace.get_tracer("modelsim")


def incoming(headers: Mapping[str, str]) -> Context | None:
    """The caller's trace context from the request headers; None when it sent none."""
    if "traceparent" not in headers:
        return None
    return propagate.extract({"traceparent": headers["traceparent"]})


def record(
    parent: Context | None,
    *,
    request_id: str,
    model: str,
    max_tokens: int | None,
    prompt_tokens: int,
    completion_tokens: int,
    arrival: float,
    admitted: float,
    first_token: float,
    finished: float,
) -> None:
    """The finished request's span; the times are `time.perf_counter()` readings."""
    now_ns, now = time.time_ns(), time.perf_counter()

    def wall(moment: float) -> int:
        return now_ns - int((now - moment) * 1e9)

    attributes: dict[str, str | int | float] = {
        "gen_ai.request.id": request_id,
        "gen_ai.response.model": model,
        "gen_ai.request.n": 1,
        "gen_ai.usage.prompt_tokens": prompt_tokens,
        "gen_ai.usage.completion_tokens": completion_tokens,
        "gen_ai.latency.time_in_queue": admitted - arrival,
        "gen_ai.latency.time_to_first_token": first_token - arrival,
        "gen_ai.latency.e2e": finished - arrival,
        "gen_ai.latency.time_in_model_prefill": max(first_token - admitted, 0.0),
        "gen_ai.latency.time_in_model_decode": max(finished - first_token, 0.0),
    }
    if max_tokens:
        attributes["gen_ai.request.max_tokens"] = max_tokens
    span = tracer.start_span(
        SPAN_NAME,
        context=parent,
        kind=SpanKind.SERVER,
        attributes=attributes,
        start_time=wall(arrival),
    )
    span.end(end_time=wall(finished))
