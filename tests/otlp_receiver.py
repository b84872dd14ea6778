"""A real OTLP/HTTP trace receiver for tests: POST /v1/traces with an
`ExportTraceServiceRequest` (application/x-protobuf), decoded with the OTLP protobuf
definitions, answered as a collector answers. It keeps every span it was sent."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanProto

PROTOBUF = "application/x-protobuf"


@dataclass
class ReceivedSpan:
    service: str
    name: str
    kind: str  # internal, server, client …
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root span
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    status: str = "unset"
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def value(any_value: AnyValue) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in any_value.kvlist_value.values}
    return getattr(any_value, kind) if kind else None


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self.content_types: set[str] = set()
        self._lock = threading.Lock()

    def take(self, body: bytes, content_type: str) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = []
        for resource_spans in request.resource_spans:
            resource = {a.key: value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        ReceivedSpan(
                            service=resource.get("service.name", ""),
                            name=span.name,
                            kind=SpanProto.SpanKind.Name(span.kind)
                            .removeprefix("SPAN_KIND_")
                            .lower(),
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            attributes={a.key: value(a.value) for a in span.attributes},
                            status=["unset", "ok", "error"][span.status.code],
                            events=[
                                (e.name, {a.key: value(a.value) for a in e.attributes})
                                for e in span.events
                            ],
                        )
                    )
        with self._lock:
            self.requests += 1
            self.content_types.add(content_type)
            self.spans.extend(spans)

    def received(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)


@contextmanager
def otlp_receiver() -> Iterator[tuple[OtlpReceiver, str]]:
    """A receiver on a free loopback port: (it, its traces URL …/v1/traces)."""
    receiver = OtlpReceiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            content_type = self.headers.get("Content-Type", "")
            if self.path != "/v1/traces" or content_type != PROTOBUF:
                self.send_error(415 if self.path == "/v1/traces" else 404)
                return
            receiver.take(body, content_type)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", PROTOBUF)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *_: Any) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver, f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    finally:
        server.shutdown()
        server.server_close()
