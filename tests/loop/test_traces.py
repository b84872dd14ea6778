"""Traces a tracing backend can read: the loop, the simulator (standing in for vLLM) and the MCP
server as processes, exporting OTLP/HTTP to a real receiver built on the OTLP protobuf
definitions; one run is one trace across the three."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from common.tracing import SHUTDOWN_SECONDS
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan, otlp_receiver
from tests.support import (
    ServiceProcess,
    free_port,
    loop_service,
    mcp_server,
    model_simulator,
    port_in_use,
    wait_until,
)

from .helpers import EMPLOYEE, stream_run

SEED_REQUEST = "把我那張家庭旅遊的特休送出審核"
RUN_SPAN = "invoke_agent leave-copilot"
CHAT_SPAN = "chat leave-copilot"


@dataclass
class Traced:
    receiver: OtlpReceiver
    loop: str
    mcp: str


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> Iterator[Traced]:
    workdir = tmp_path_factory.mktemp("traced")
    with pytest.MonkeyPatch.context() as env, otlp_receiver() as (receiver, url):
        # The SDK's batch goes out 5 s after a span ends by default; 50 ms keeps the test short.
        env.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        with (
            mcp_server(workdir, MCP_OTLP_TRACES_ENDPOINT=url) as mcp,
            model_simulator(workdir, profile="instant", otlp_traces_endpoint=url) as sim,
            loop_service(workdir, f"{sim}/v1", f"{mcp}/mcp", otlp_traces_endpoint=url) as (
                loop,
                _,
            ),
        ):
            yield Traced(receiver, loop, f"{mcp}/mcp")


def run(loop: str, text: str) -> dict:
    response = httpx.post(f"{loop}/v1/runs", json={"input": text}, headers=EMPLOYEE, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def run_trace(receiver: OtlpReceiver, run_id: str, complete) -> list[ReceivedSpan]:
    """The spans of the run's trace, once `complete(spans)` says all have arrived."""
    found: list[ReceivedSpan] = []

    def arrived() -> bool:
        spans = receiver.received()
        root = next(
            (
                s
                for s in spans
                if s.name == RUN_SPAN and s.attributes["leave_loop.run.id"] == run_id
            ),
            None,
        )
        if root is None:
            return False
        found[:] = [s for s in spans if s.trace_id == root.trace_id]
        return complete(found)

    wait_until(arrived, timeout=20, what=f"the spans of {run_id}")
    return found


def one(spans: list[ReceivedSpan], **where) -> ReceivedSpan:
    matches = [s for s in spans if all(getattr(s, k) == v for k, v in where.items())]
    assert len(matches) == 1, (where, [(s.service, s.name) for s in spans])
    return matches[0]


def tree(spans: list[ReceivedSpan]) -> str:
    """The trace as an indented tree, for the test's output."""
    children: dict[str, list[ReceivedSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_ns):
        children.setdefault(span.parent_id, []).append(span)
    lines: list[str] = []

    def show(span: ReceivedSpan, depth: int) -> None:
        shown = {k: v for k, v in span.attributes.items() if k.startswith(("gen_ai.", "mcp."))}
        ms = (span.end_ns - span.start_ns) / 1e6
        lines.append(
            f"{'  ' * depth}{span.name} [{span.service}, {span.kind}, {ms:.1f} ms] {shown}"
        )
        for child in children.get(span.span_id, []):
            show(child, depth + 1)

    for root in children.get("", []):
        show(root, 0)
    return "\n".join(lines)


def test_one_run_is_one_trace_from_the_loop_through_the_model_to_the_mcp_server(traced):
    _, final = stream_run(traced.loop, {"input": SEED_REQUEST})
    assert final.status == "completed", final
    record = httpx.get(f"{traced.loop}/v1/runs/{final.id}", headers=EMPLOYEE).json()
    model_steps = [s for s in record["steps"] if s["type"] == "model"]
    tool_steps = [s for s in record["steps"] if s["type"] == "tool"]
    assert [s["name"] for s in tool_steps] == ["search_leaves", "update_leave_status"]

    def complete(spans: list[ReceivedSpan]) -> bool:
        # The request's span ends after the run's (the stream closes last), so it may come
        # in a later batch: wait for it too.
        names = [(s.service, s.name) for s in spans]
        return (
            ("leave-loop", "POST /v1/runs") in names
            and names.count(("modelsim", "llm_request")) == len(model_steps)
            and all(("leave-mcp-server", f"tools/call {s['name']}") in names for s in tool_steps)
        )

    spans = run_trace(traced.receiver, final.id, complete)
    print(f"\nthe trace of {final.id} ({spans[0].trace_id}):\n{tree(spans)}")
    by_id = {s.span_id: s for s in spans}
    assert {s.service for s in spans} == {"leave-loop", "modelsim", "leave-mcp-server"}
    # one root, the run's request (FastAPI's span), and every other span's parent is in the
    # same trace
    request = one(spans, name="POST /v1/runs")
    assert request.service == "leave-loop" and request.kind == "server"
    assert [s for s in spans if not s.parent_id] == [request]
    assert all(s.parent_id in by_id for s in spans if s is not request)
    root = one(spans, name=RUN_SPAN)
    assert root.parent_id == request.span_id

    # the run: its usage is the record's
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.agent.name"] == "leave-copilot"
    assert root.attributes["gen_ai.conversation.id"] == final.session_id
    assert root.attributes["gen_ai.usage.input_tokens"] == record["usage"]["prompt_tokens"] > 0
    assert root.attributes["gen_ai.usage.output_tokens"] == record["usage"]["completion_tokens"]
    assert root.attributes["leave_loop.status"] == "completed"

    # each model call: a CLIENT span under the run with the step's tokens, and the model
    # server's own span under it (with the same tokens, by vLLM's names)
    chats = sorted((s for s in spans if s.name == CHAT_SPAN), key=lambda s: s.start_ns)
    assert len(chats) == len(model_steps) == record["turns"] == 3
    for chat, step in zip(chats, model_steps, strict=True):
        assert chat.service == "leave-loop" and chat.kind == "client"
        assert chat.parent_id == root.span_id
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "vllm"
        assert chat.attributes["gen_ai.request.model"] == "leave-copilot"
        assert chat.attributes["gen_ai.usage.input_tokens"] == step["prompt_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] == step["completion_tokens"] > 0
        assert chat.attributes["gen_ai.response.finish_reasons"] == [
            step["result"]["finish_reason"]
        ]
        served = one(spans, name="llm_request", parent_id=chat.span_id)
        assert served.service == "modelsim" and served.kind == "server"
        assert served.attributes["gen_ai.request.id"] == chat.attributes["gen_ai.response.id"]
        assert served.attributes["gen_ai.usage.prompt_tokens"] == step["prompt_tokens"]
        assert served.attributes["gen_ai.usage.completion_tokens"] == step["completion_tokens"]
        assert chat.start_ns <= served.start_ns <= served.end_ns <= chat.end_ns

    # each tool call: execute_tool under the run, the MCP SDK's client span under it, and the
    # MCP server's span a child of that one
    for step in tool_steps:
        name = step["name"]
        tool = one(spans, name=f"execute_tool {name}")
        assert tool.service == "leave-loop" and tool.parent_id == root.span_id
        assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
        assert tool.attributes["gen_ai.tool.name"] == name
        assert tool.attributes["gen_ai.tool.call.id"] == step["tool_call_id"]
        sent = one(spans, name=f"MCP send tools/call {name}")
        assert sent.service == "leave-loop" and sent.kind == "client"
        assert sent.parent_id == tool.span_id
        server = one(spans, name=f"tools/call {name}")
        assert server.service == "leave-mcp-server" and server.kind == "server"
        assert server.parent_id == sent.span_id
        assert server.attributes["gen_ai.tool.name"] == name
        assert server.attributes["mcp.method.name"] == "tools/call"
    assert traced.receiver.content_types == {"application/x-protobuf"}


async def test_the_mcp_server_continues_a_trace_from_the_traceparent_header_alone(traced):
    # This process sets up no tracing: the SDK's client puts no trace context in `_meta`,
    # so the header is all the server has.
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    headers = {**EMPLOYEE, "traceparent": f"00-{trace_id}-{parent_id}-01"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(traced.mcp, http_client=http)) as client,
    ):
        result = await client.call_tool("search_leaves", {"keyword": "家庭旅遊"})
    assert not result.is_error

    def arrived() -> bool:
        return any(
            s.trace_id == trace_id and s.name == "tools/call search_leaves"
            for s in traced.receiver.received()
        )

    wait_until(arrived, timeout=20, what="the MCP server's span in the caller's trace")
    span = one(traced.receiver.received(), trace_id=trace_id, name="tools/call search_leaves")
    assert span.parent_id == parent_id and span.service == "leave-mcp-server"


def test_the_spans_still_queued_are_delivered_when_the_loop_stops(tmp_path):
    with pytest.MonkeyPatch.context() as env, otlp_receiver() as (receiver, url):
        env.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")  # no batch goes out on its own
        with (
            mcp_server(tmp_path) as mcp,
            model_simulator(tmp_path, profile="instant") as sim,
            loop_service(tmp_path, f"{sim}/v1", f"{mcp}/mcp", otlp_traces_endpoint=url) as (
                loop,
                _,
            ),
        ):
            final = run(loop, "查一下我表妹婚禮的假單")
            assert receiver.requests == 0
        # stopped: its lifespan's end sent the batch it held
        names = [s.name for s in receiver.received()]
    assert RUN_SPAN in names and names.count(CHAT_SPAN) == final["turns"]


def test_with_no_endpoint_nothing_is_exported(tmp_path):
    with pytest.MonkeyPatch.context() as env, otlp_receiver() as (receiver, url):
        # the SDK's own variable, as a site's environment might carry it: not a switch here
        env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url)
        env.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        with (
            mcp_server(tmp_path) as mcp,
            model_simulator(tmp_path, profile="instant") as sim,
            loop_service(tmp_path, f"{sim}/v1", f"{mcp}/mcp") as (loop, _),
        ):
            assert run(loop, SEED_REQUEST)["status"] == "completed"
        # Stopped: a tracer provider would have sent what it held as it stopped (the test
        # above). None was made.
        assert receiver.requests == 0 and receiver.received() == []
    logs = "".join(path.read_text() for path in tmp_path.glob("*.log"))
    assert '"trace_id"' not in logs


def test_the_trace_log_writes_the_same_spans_as_json_lines(tmp_path):
    with (
        mcp_server(tmp_path) as mcp,
        model_simulator(tmp_path, profile="instant") as sim,
        loop_service(tmp_path, f"{sim}/v1", f"{mcp}/mcp", trace_log="true") as (loop, _),
    ):
        final = run(loop, "查一下我表妹婚禮的假單")
        assert final["status"] == "completed"
    (log,) = tmp_path.glob("loop-*.log")
    records = [
        json.loads(line.split(" loop.trace ", 1)[1])
        for line in log.read_text().splitlines()
        if " loop.trace " in line
    ]
    root = next(r for r in records if r["name"] == RUN_SPAN)
    assert root["attributes"]["leave_loop.run.id"] == final["id"]
    mine = [r for r in records if r["trace_id"] == root["trace_id"]]
    names = [r["name"] for r in mine]
    assert names.count(CHAT_SPAN) == final["turns"] == 2
    assert "execute_tool search_leaves" in names
    ids = {r["span_id"] for r in mine}
    (request,) = [r for r in mine if r["parent_id"] is None]
    assert request["name"] == "POST /v1/runs" and root["parent_id"] == request["span_id"]
    assert all(r["parent_id"] in ids for r in mine if r is not request)
    chat = next(r for r in mine if r["name"] == CHAT_SPAN)
    assert chat["parent_id"] == root["span_id"] and chat["kind"] == "client"
    assert chat["attributes"]["gen_ai.usage.input_tokens"] == final["steps"][0]["prompt_tokens"]


def test_a_collector_that_never_answers_neither_fails_nor_slows_runs_nor_holds_up_the_exit(
    tmp_path,
):
    with (
        port_in_use() as silent,  # accepts connections into its backlog, never answers
        pytest.MonkeyPatch.context() as env,
        mcp_server(tmp_path) as mcp,
        model_simulator(tmp_path, profile="instant") as sim,
    ):
        env.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        port = free_port()
        loop = ServiceProcess(
            ["loop"],
            {
                "LOOP_PORT": str(port),
                "LOOP_MODEL_BASE_URL": f"{sim}/v1",
                "LOOP_MCP_URL": f"{mcp}/mcp",
                "LOOP_STORE_URL": f"sqlite:///{tmp_path / 'loop.db'}",
                "LOOP_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{silent}/v1/traces",
            },
            tmp_path / "loop-silent-collector.log",
        )
        try:
            loop.wait_ready(f"http://127.0.0.1:{port}/healthz")
            durations = []
            for _ in range(5):
                started = time.monotonic()
                final = run(f"http://127.0.0.1:{port}", "查一下我的假單")
                durations.append(time.monotonic() - started)
                assert final["status"] == "completed", final
            # the first export is already waiting on the collector (its timeout is 10 s)
            assert max(durations) < 2.0, durations
            print(f"\nrun durations with a silent collector: {[round(d, 3) for d in durations]} s")
        finally:
            started = time.monotonic()
            loop.stop()
            stopped_in = time.monotonic() - started
    print(f"the loop stopped in {stopped_in:.2f} s")
    # ended by the stop signal, as uvicorn ends (re-raised after its shutdown), not killed
    assert loop.process.returncode == -signal.SIGTERM, loop.log()
    assert stopped_in < SHUTDOWN_SECONDS + 3, loop.log()
    assert "the last spans were dropped" in loop.log()
