"""One conversation with the runs API (common/run_conversation.py), two clients that carry it
out: RunClient (httpx2, asyncio) and the load test's TimedRunClient (http.client, each read
timed). Against one scripted loop over real sockets, both send the same requests, show the
same events, answer by the same policy and fail the same ways; the conversation itself is
driven here by hand too, with no I/O at all."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from common import sse
from common.run_client import RunClient
from common.run_conversation import (
    Ask,
    Conversation,
    Done,
    Open,
    Read,
    ReplyRefused,
    Request,
    Response,
    Rest,
    RunRefused,
    Send,
    Show,
    StreamEnded,
    always,
)
from common.runs_protocol import ConfirmationRequested, RunEvent, RunFinished
from loadtest.client import HttpError, StreamingClient, TimedRunClient, timed_run

RUN = {"id": "run-1", "session_id": "s-1", "status": "completed", "input": "x", "answer": "好"}
QUESTION = {"confirmation_id": "cf-1", "message": "確定要取消嗎？", "schema": {"type": "object"}}


@dataclass
class Loop:
    """A loop that serves one scripted run per request text: `ask` asks a question and waits
    for its answer, `refuse` is a 503, `cut` ends the stream before run.finished; answers
    get `reply_status`."""

    url: str
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    reply_status: int = 200
    answered: threading.Event = field(default_factory=threading.Event)
    # set: the run ends only once the client has seen the answer's first token
    delta_seen: threading.Event | None = None
    finished_sent_at: float = 0.0
    answer_received_at: float = 0.0  # perf_counter: the clients run in this process


def _frames(text: str, loop: Loop) -> Iterator[bytes]:
    yield sse.frame({"id": "run-1", "session_id": "s-1"}, "run.started")
    yield sse.frame({"anything": 1}, "something.newer")  # a newer loop's: skipped
    if text == "ask":
        loop.answered.clear()
        yield sse.frame(QUESTION, "confirmation.requested")
        loop.answered.wait(1)  # unanswered: the loop goes on (as its timeout would)
        yield sse.frame({"outcome": "accepted", "message": "ok"}, "confirmation.resolved")
    yield sse.frame({"text": "好"}, "answer.delta")
    if loop.delta_seen is not None:
        loop.delta_seen.wait(5)
    if text != "cut":
        loop.finished_sent_at = time.perf_counter()
        yield sse.frame(RUN, "run.finished")


@pytest.fixture
def loop() -> Iterator[Loop]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    scripted = Loop(f"http://127.0.0.1:{server.server_port}")
    server.loop = scripted  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield scripted
    finally:
        server.shutdown()
        server.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_args: Any) -> None:
        pass

    def do_POST(self) -> None:
        loop: Loop = self.server.loop  # type: ignore[attr-defined]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        loop.requests.append(("POST", self.path, body))
        if self.path != "/v1/runs":
            loop.answer_received_at = time.perf_counter()
            loop.answered.set()
            self._answer(loop.reply_status, {"status": "answered", "action": body["action"]})
        elif body["input"] == "refuse":
            self._answer(503, {"detail": "the loop is busy: 忙"})
        else:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for frame in _frames(body["input"], loop):
                self.wfile.write(frame)
                self.wfile.flush()
            self.close_connection = True

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def run_async(loop: Loop, text: str, **options: Any) -> tuple[RunFinished, list[RunEvent]]:
    events: list[RunEvent] = []

    async def run() -> RunFinished:
        async with RunClient(loop.url, "token") as client:
            return await client.run(text, on_event=events.append, **options)

    return asyncio.run(run()), events


def run_timed(loop: Loop, text: str, **options: Any) -> tuple[RunFinished, list[RunEvent]]:
    events: list[RunEvent] = []
    stream, control = StreamingClient(loop.url), StreamingClient(loop.url)
    try:
        client = TimedRunClient(stream, control)
        final = client.run(text, on_event=lambda event, _at: events.append(event), **options).final
    finally:
        stream.close()
        control.close()
    return final, events


CLIENTS = {"RunClient": run_async, "TimedRunClient": run_timed}


@pytest.mark.parametrize("client", CLIENTS)
def test_both_clients_run_the_same_conversation(loop, client):
    final, events = CLIENTS[client](loop, "ask", answer=always("accept"), session_id="s-1")
    assert loop.requests == [
        ("POST", "/v1/runs", {"input": "ask", "stream": True, "session_id": "s-1"}),
        ("POST", "/v1/runs/run-1/confirmations/cf-1", {"action": "accept"}),
    ]
    assert [e.event for e in events] == [
        "run.started",
        "confirmation.requested",
        "confirmation.resolved",
        "answer.delta",
        "run.finished",
    ]
    assert events[-1] is final and final.id == "run-1" and final.answer == "好"


@pytest.mark.parametrize("client", CLIENTS)
def test_a_question_no_policy_answers_is_left_open(loop, client):
    final, _ = CLIENTS[client](loop, "ask")
    assert [path for _, path, _ in loop.requests] == ["/v1/runs"] and final.id == "run-1"


@pytest.mark.parametrize("client", CLIENTS)
def test_both_clients_fail_alike(loop, client):
    run = CLIENTS[client]
    with pytest.raises(RunRefused) as refused:
        run(loop, "refuse")
    assert refused.value.status == 503 and "忙" in refused.value.text
    with pytest.raises(StreamEnded) as ended:
        run(loop, "cut")
    assert ended.value.run_id == "run-1"
    loop.reply_status = 409
    with pytest.raises(ReplyRefused) as not_taken:
        run(loop, "ask", answer=always("decline"))
    assert not_taken.value.status == 409
    assert not_taken.value.request.path == "/v1/runs/run-1/confirmations/cf-1"
    # answered already: not an error to a client that tolerates it
    final, _ = run(loop, "ask", answer=always("decline"), tolerate_gone=True)
    assert final.id == "run-1"


def test_the_timed_client_stamps_each_event_by_its_arrival(loop):
    arrivals: list[tuple[str, float]] = []
    loop.delta_seen = threading.Event()

    def arrived(event: Any, at: float) -> None:
        arrivals.append((event.event, at))
        if event.event == "answer.delta":
            loop.delta_seen.set()

    stream, control = StreamingClient(loop.url), StreamingClient(loop.url)
    try:
        started, *_ = TimedRunClient(stream, control).run("x", on_event=arrived)
    finally:
        stream.close()
        control.close()
    ats = dict(arrivals)
    assert started < ats["run.started"] <= ats["answer.delta"]
    # the delta was stamped before the loop even sent the end: stamped as it arrived
    assert ats["answer.delta"] < loop.finished_sent_at <= ats["run.finished"]


def test_the_load_tests_run_sample_and_its_errors_keep_their_words(loop):
    stream, control = StreamingClient(loop.url), StreamingClient(loop.url)
    try:
        sample = timed_run(stream, control, "ask", None, "s-1")
        assert loop.requests[-1][2] == {"action": "decline"}  # None: decline, as ever
        assert sample.confirmations == 1 and sample.status == "completed"
        assert sample.session_id == "s-1" and sample.first_answer_ms is not None
        # taken at the answer's first token, not at the end (each event's own arrival stamp:
        # test_the_timed_client_stamps_each_event_by_its_arrival); here both may come in one read
        assert 0 < sample.first_answer_ms <= sample.run_ms
        with pytest.raises(HttpError) as refused:
            timed_run(stream, control, "refuse", "accept")
        body = json.dumps({"detail": "the loop is busy: 忙"}, ensure_ascii=False).encode()
        assert str(refused.value) == f"POST /v1/runs: HTTP 503: {body!r}"
        with pytest.raises(HttpError, match=r"^the stream ended before run\.finished$"):
            timed_run(stream, control, "cut", "accept")
    finally:
        stream.close()
        control.close()


def test_the_timed_client_leaves_the_time_before_an_answer_out_of_the_runs_time(loop):
    """The person takes their time: they answer only after a whole other run of theirs has
    finished. That time, from the question's arrival to the answer going out, is the run's
    `waiting` (and the load test's confirmation_wait_ms), which its working time leaves out."""
    asked: list[float] = []
    gap: list[float] = []

    def person(_question: Any) -> str:
        began = time.perf_counter()
        other_stream, other_control = StreamingClient(loop.url), StreamingClient(loop.url)
        try:
            other = TimedRunClient(other_stream, other_control).run("x")
        finally:
            other_stream.close()
            other_control.close()
        assert other.final.status == "completed" and other.waiting == 0
        gap.append(time.perf_counter() - began)
        return "accept"

    def seen(event: Any, at: float) -> None:
        if event.event == "confirmation.requested":
            asked.append(at)

    stream, control = StreamingClient(loop.url), StreamingClient(loop.url)
    try:
        timed = TimedRunClient(stream, control).run("ask", answer=person, on_event=seen)
        # a question in the load test's own sample: the same measure, in ms
        sample = timed_run(stream, control, "ask", "accept", "s-1")
    finally:
        stream.close()
        control.close()
    assert timed.final.status == "completed" and len(asked) == 1
    # from no later than the person began to no earlier than the loop got the answer
    assert gap[0] <= timed.waiting <= loop.answer_received_at - asked[0]
    assert 0 < sample.confirmation_wait_ms < sample.run_ms


def test_the_conversation_itself_does_no_io():
    """What a transport does, by hand: each command answered, nothing else."""
    conversation = Conversation("cancel it", run_id="mine")
    assert conversation.next() == Open(
        Request("POST", "/v1/runs", {"input": "cancel it", "stream": True, "run_id": "mine"})
    )
    assert conversation.next(200) == Read()
    started = sse.Event("run.started", '{"id": "mine", "session_id": "s"}', at=1.5)
    assert isinstance(shown := conversation.next(started), Show) and shown.at == 1.5
    assert conversation.next() == Read()
    question = sse.Event("confirmation.requested", json.dumps(QUESTION))
    assert isinstance(conversation.next(question), Show)
    assert conversation.next() == Ask(ConfirmationRequested.model_validate(QUESTION))
    reply = Request("POST", "/v1/runs/mine/confirmations/cf-1", {"action": "cancel"})
    assert conversation.next("cancel") == Send(reply)
    assert conversation.next(Response(200, "{}")) == Read()
    finished = sse.Event("run.finished", json.dumps({**RUN, "id": "mine"}))
    assert isinstance(conversation.next(finished), Show)
    assert conversation.next() == Done(conversation.final) and conversation.final.id == "mine"

    refused = Conversation("x")
    refused.next()
    assert refused.next(503) == Rest()
    with pytest.raises(RunRefused, match="503: busy"):
        refused.next("busy")
