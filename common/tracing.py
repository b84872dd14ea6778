"""A service process's OpenTelemetry traces: exported over OTLP/HTTP when an endpoint is set,
logged as JSON lines when asked. With neither, no SDK object is made at all: the spans the code
opens are the API's no-ops and nothing is propagated.

Set up once per process, in its `__main__` (the tracer provider is process-global: the MCP SDK's
and FastAPI's own spans use it too), and shut down as the app's lifespan ends.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import context, propagate

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExportResult
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)
# A collector that does not answer must not hold the process up at exit: the last batch is
# given this long, then dropped (the export's own timeout, OTEL_EXPORTER_OTLP_TRACES_TIMEOUT,
# is 10 s).
SHUTDOWN_SECONDS = 3.0


class Tracing:
    """What `start` set up; `shutdown` delivers what is still queued, within SHUTDOWN_SECONDS."""

    def __init__(self, provider: TracerProvider, endpoint: str | None) -> None:
        self.provider = provider
        self.endpoint = endpoint

    def around(self, app: ASGIApp) -> ASGIApp:
        """`app`, with this shut down as its lifespan ends: uvicorn ends the process by
        raising the stop signal again once it has served, so nothing after serving runs."""

        async def flushing(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "lifespan":
                await app(scope, receive, send)
                return

            async def sending(message: Message) -> None:
                if message["type"] == "lifespan.shutdown.complete":
                    await asyncio.to_thread(self.shutdown)
                await send(message)

            await app(scope, receive, sending)

        return flushing

    def shutdown(self) -> None:
        # On a thread of its own: the SDK waits for its export thread, which may be blocked
        # on a collector that accepted the connection and never answers.
        flushing = threading.Thread(target=self.provider.shutdown, name="trace-flush", daemon=True)
        flushing.start()
        flushing.join(SHUTDOWN_SECONDS)
        if flushing.is_alive():
            logger.warning(
                "the last spans were dropped: %s did not take them within %g s",
                self.endpoint,
                SHUTDOWN_SECONDS,
            )


def start(
    service: str, *, endpoint: str | None, log: logging.Logger | None = None
) -> Tracing | None:
    """Traces of this process as `service`: to the OTLP/HTTP `endpoint` (the full URL, e.g.
    http://collector:4318/v1/traces), and as one JSON line per span on `log`. None when
    neither is asked for. The exporter's other settings (headers, TLS, compression, timeout)
    are the SDK's standard OTEL_EXPORTER_OTLP_TRACES_* variables."""
    if not endpoint and log is None:
        return None
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    # shutdown_on_exit off: `Tracing.shutdown` bounds the wait, the SDK's atexit hook would not
    provider = TracerProvider(
        resource=Resource.create({"service.name": service}), shutdown_on_exit=False
    )
    if endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        # Batched on the SDK's own thread: a slow or dead collector costs a run nothing; a
        # full queue (2048 spans) drops new spans instead of waiting.
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    if log is not None:
        provider.add_span_processor(SimpleSpanProcessor(_log_exporter(log)))
    trace.set_tracer_provider(provider)
    return Tracing(provider, endpoint)


def _log_exporter(log: logging.Logger) -> Any:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class LogSpanExporter(SpanExporter):
        """One JSON line per finished span: ids, parent, name, start, duration, attributes."""

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            for span in spans:
                log.info(json.dumps(span_record(span), ensure_ascii=False))
            return SpanExportResult.SUCCESS

    return LogSpanExporter()


def span_record(span: ReadableSpan) -> dict[str, Any]:
    started = span.start_time or 0
    ended = span.end_time or started
    parent = span.parent
    return {
        "trace_id": f"{span.context.trace_id:032x}" if span.context else None,
        "span_id": f"{span.context.span_id:016x}" if span.context else None,
        "parent_id": f"{parent.span_id:016x}" if parent else None,
        "name": span.name,
        "kind": span.kind.name.lower(),
        "start": dt.datetime.fromtimestamp(started / 1e9, dt.UTC).isoformat(),
        "duration_ms": round((ended - started) / 1e6, 3),
        "status": span.status.status_code.name.lower(),
        "attributes": dict(span.attributes or {}),
    }


class TraceContext:
    """ASGI middleware: a request that carries a W3C `traceparent` header is served inside
    that trace, so the spans its handling opens (this service's, the MCP SDK's) continue it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope.get("headers", [])
            if name in (b"traceparent", b"tracestate")
        }
        if not carrier:
            await self.app(scope, receive, send)
            return
        token = context.attach(propagate.extract(carrier))
        try:
            await self.app(scope, receive, send)
        finally:
            context.detach(token)


def inject_headers(headers: dict[str, str]) -> dict[str, str]:
    """`headers` with the current span's `traceparent` (and `tracestate`) added, if any."""
    propagate.inject(headers)
    return headers
