"""A byte-stream SSE client with per-token timing, on the standard library's http.client.

Why not Locust's clients: `FastHttpUser.iter_content(1024)`/`iter_lines()` block until 1 KB has
arrived, which turns a 50 ms TTFT into ~200 ms and smears the gaps between tokens. Here every
`read1` returns what the socket has, is stamped with `perf_counter()` as it arrives, and SSE
lines are reassembled across reads. Under Locust, gevent makes these sockets cooperative.

An agent run is the runs API's conversation (common/run_conversation.py, the same one
common.run_client's RunClient carries out over httpx2): TimedRunClient carries it out on these
timed streams, so the load test starts runs and answers their questions as every other client
does, and times each event by when its bytes arrived.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple, assert_never
from urllib.parse import urlsplit

from common import tokens
from common.contract import StepKind
from common.run_conversation import (
    Ask,
    Conversation,
    Done,
    Open,
    Policy,
    Read,
    Request,
    Response,
    Rest,
    RunRefused,
    Send,
    Show,
    StreamEnded,
    always,
)
from common.runs_protocol import (
    AnswerDelta,
    ConfirmAction,
    ConfirmationRequested,
    ConfirmationResolved,
    ConfirmMode,
    Detection,
    ModelFinished,
    ModelStarted,
    RunEvent,
    RunFinished,
    RunStarted,
    ToolFinished,
    ToolStarted,
)
from common.sse import Event, Parser

READ_SIZE = 65536  # an upper bound only: read1 returns as soon as any bytes are there


class HttpError(Exception):
    pass


# What a keep-alive connection the server has already closed raises on the next request.
STALE_CONNECTION = (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected)


class StreamingClient:
    """One keep-alive HTTP/1.1 connection to `base_url` (reconnects after an error)."""

    def __init__(
        self, base_url: str, headers: dict[str, str] | None = None, timeout: float = 600.0
    ) -> None:
        parts = urlsplit(base_url)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._https = parts.scheme == "https"
        self._prefix = parts.path.rstrip("/")
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        self._timeout = timeout
        self._conn: http.client.HTTPConnection | None = None
        self._response: http.client.HTTPResponse | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._response is not None and not self._response.isclosed():
            self.close()  # a stream left unread (its reader stopped early) holds the connection
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._conn = cls(self._host, self._port, timeout=self._timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._response = None

    def _send(
        self, method: str, path: str, payload: bytes | None
    ) -> tuple[float, http.client.HTTPResponse]:
        """(the perf_counter just before the request went out, the response)."""
        reused = self._conn is not None
        try:
            return self._attempt(method, path, payload)
        except STALE_CONNECTION:
            self.close()
            if not reused:
                raise
        # The server closed the idle keep-alive connection while the user was thinking (uvicorn
        # does after 5 s): it never saw this request, so send it once more on a new connection.
        try:
            return self._attempt(method, path, payload)
        except Exception:
            self.close()
            raise

    def _attempt(
        self, method: str, path: str, payload: bytes | None
    ) -> tuple[float, http.client.HTTPResponse]:
        try:
            conn = self._connection()
            started = time.perf_counter()
            conn.request(method, self._prefix + path, body=payload, headers=self._headers)
            self._response = conn.getresponse()
            return started, self._response
        except Exception:
            self.close()
            raise

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        """(the status, the body), whatever the status."""
        _, response = self._send(method, path, _encode(body))
        return response.status, response.read()

    def request_json(self, method: str, path: str, body: Any = None) -> Any:
        status, data = self.request(method, path, body)
        if status >= 400:
            raise HttpError(f"{method} {path}: HTTP {status}: {data[:300]!r}")
        return json.loads(data) if data else None

    def open(self, method: str, path: str, body: Any) -> tuple[float, http.client.HTTPResponse]:
        """Send and return (the perf_counter just before sending, the response, its body
        unread), whatever the status."""
        payload = _encode(body)  # before the clock starts: serialising is not the server's time
        return self._send(method, path, payload)

    def stream(self, path: str, body: Any) -> tuple[float, Iterator[Event]]:
        """POST and return (the perf_counter just before sending, the events as they arrive)."""
        started, response = self.open("POST", path, body)
        if response.status >= 400:
            data = response.read()
            raise HttpError(f"POST {path}: HTTP {response.status}: {data[:300]!r}")
        return started, self.events(response)

    def events(self, response: http.client.HTTPResponse) -> Iterator[Event]:
        """The response's events as they arrive, each stamped with when its bytes did."""
        parser = Parser()
        try:
            while True:
                chunk = response.read1(READ_SIZE)
                at = time.perf_counter()
                if not chunk:
                    return
                yield from parser.feed(chunk, at)
        except Exception:
            self.close()
            raise


def _encode(body: Any) -> bytes | None:
    return None if body is None else json.dumps(body, ensure_ascii=False).encode()


@dataclass
class ChatSample:
    """One streamed chat completion, by `vllm bench serve`'s definitions."""

    id: str | None = None  # the completion's id, as the server logs it too
    ttft_ms: float = 0.0
    itl_ms: list[float] = field(default_factory=list)
    e2e_ms: float = 0.0
    prompt_tokens: int = 0
    output_tokens: int = 0
    finish_reason: str | None = None

    @property
    def tpot_ms(self) -> float | None:
        # TPOT = (e2e − TTFT) / (output_tokens − 1)
        if self.output_tokens < 2:
            return None
        return (self.e2e_ms - self.ttft_ms) / (self.output_tokens - 1)


def timed_chat(client: StreamingClient, body: dict[str, Any]) -> ChatSample:
    """Stream one chat completion; `usage` (stream_options.include_usage) gives the token counts.

    A token is a chunk whose delta carries content or a tool call: the opening role-only chunk
    and the closing finish-reason chunk carry none, so they stamp neither TTFT nor a gap.
    """
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    started, events = client.stream("/chat/completions", body)
    sample = ChatSample()
    first: float | None = None
    last = 0.0
    end: float | None = None
    for event in events:  # read to the end of the body, so the connection can be reused
        if end is not None:
            continue
        if event.data == "[DONE]":
            end = event.at
            continue
        chunk = json.loads(event.data)
        if "error" in chunk:
            raise HttpError(f"error in stream: {chunk['error']}")
        sample.id = sample.id or chunk.get("id")
        if chunk.get("usage"):
            sample.prompt_tokens = chunk["usage"].get("prompt_tokens", 0)
            sample.output_tokens = chunk["usage"].get("completion_tokens", 0)
        for choice in chunk.get("choices") or []:
            sample.finish_reason = choice.get("finish_reason") or sample.finish_reason
            delta = choice.get("delta") or {}
            if not (delta.get("content") or delta.get("tool_calls")):
                continue
            if first is None:
                first = event.at
            else:
                sample.itl_ms.append((event.at - last) * 1000)
            last = event.at
    if first is None or end is None:
        raise HttpError("the stream ended without a token or without [DONE]")
    sample.ttft_ms = (first - started) * 1000
    sample.e2e_ms = (end - started) * 1000
    return sample


class TimedRun(NamedTuple):
    started: float  # the perf_counter just before the run's request went out
    final: RunFinished
    # The client's own time over the run's questions: from each question's bytes arriving to
    # its answer going out (the person's reading time, where a policy takes any). Not the
    # service's, so a run's latency leaves it out.
    waiting: float = 0.0


# What a timed run's listener is told: each event, and when the bytes that completed it arrived.
OnTimedEvent = Callable[[RunEvent, float], None]


class TimedRunClient:
    """The runs API's conversation (common.run_conversation: the one RunClient carries out
    over httpx2) carried out on two of this module's clients: the run's stream on `stream`,
    the answers to its questions on `control` (the stream's connection is busy)."""

    def __init__(self, stream: StreamingClient, control: StreamingClient) -> None:
        self.stream, self.control = stream, control

    def run(
        self,
        text: str,
        *,
        answer: Policy | None = None,
        on_event: OnTimedEvent | None = None,
        session_id: str | None = None,
        run_id: str | None = None,
        confirm: ConfirmMode | None = None,
        tolerate_gone: bool = False,
    ) -> TimedRun:
        """Stream the run and answer its questions by `answer` (None: leave them unanswered);
        `on_event` sees every event, with its arrival, first. Raises as RunClient.run does
        (RunRefused, ReplyRefused, StreamEnded), and what the connections raise."""
        conversation = Conversation(
            text, session_id=session_id, run_id=run_id, confirm=confirm, tolerate_gone=tolerate_gone
        )
        started, response = 0.0, None
        events: Iterator[Event] = iter(())
        outcome: Any = None
        asked_at, waiting = 0.0, 0.0
        while True:
            command = conversation.next(outcome)
            outcome = None
            match command:
                case Open(request):
                    started, response = self.stream.open(request.method, request.path, request.body)
                    events = self.stream.events(response)
                    outcome = response.status
                case Rest():
                    assert response is not None
                    outcome = response.read().decode("utf-8", "replace")
                case Read():
                    outcome = next(events, None)
                case Show(event, at):
                    if isinstance(event, ConfirmationRequested):
                        asked_at = at
                    if on_event is not None:
                        on_event(event, at)
                case Ask(question):
                    outcome = None if answer is None else answer(question)
                case Send(request):  # an answer to the question last asked
                    waiting += time.perf_counter() - asked_at
                    outcome = self._send(request)
                case Done(final):
                    for _ in events:  # read to the end of the body, so the connection is reused
                        pass
                    return TimedRun(started, final, waiting)
                case _:
                    assert_never(command)

    def _send(self, request: Request) -> Response:
        status, data = self.control.request(request.method, request.path, request.body)
        return Response(status, data.decode("utf-8", "replace"))


@dataclass
class RunSample:
    """One agent run through the loop's API, start to run.finished."""

    first_answer_ms: float | None = None
    run_ms: float = 0.0  # wall time, start to run.finished
    # of run_ms, the client's time between a question arriving and its answer going out
    confirmation_wait_ms: float = 0.0
    status: str = ""
    turns: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    confirmations: int = 0
    session_id: str | None = None
    tools: list[str] = field(default_factory=list)  # each tool call's name, in order
    tool_errors: int = 0  # tool calls that came back as errors (a refusal, a declined cancel)
    # The prompt records the cost calculator measures the repeated prefix from: each model
    # call's prompt tokens in order, and the tokens of the text this client sent.
    call_prompt_tokens: list[int] = field(default_factory=list)
    request_tokens: int = 0


def timed_run(
    stream_client: StreamingClient,
    control_client: StreamingClient,
    text: str,
    answer: ConfirmAction | None,
    session_id: str | None = None,
) -> RunSample:
    """One streamed run (TimedRunClient); each confirmation is answered with `answer`
    (decline when None) over the second connection."""
    sample = RunSample()
    first_answer: float | None = None
    finished_at = 0.0

    def seen(event: RunEvent, at: float) -> None:
        nonlocal first_answer, finished_at
        match event:
            case AnswerDelta():
                if first_answer is None:
                    first_answer = at
            case ConfirmationRequested():
                sample.confirmations += 1
            case RunFinished():
                finished_at = at
            case (
                RunStarted()
                | ModelStarted()
                | ModelFinished()
                | ToolStarted()
                | ToolFinished()
                | Detection()
                | ConfirmationResolved()
            ):
                pass
            case unexpected:
                assert_never(unexpected)

    client = TimedRunClient(stream_client, control_client)
    try:
        started, finished, waiting = client.run(
            text, answer=always(answer or "decline"), on_event=seen, session_id=session_id or None
        )
    except (RunRefused, StreamEnded) as error:
        raise _worded(error) from error
    if first_answer is not None:
        sample.first_answer_ms = (first_answer - started) * 1000
    sample.run_ms = (finished_at - started) * 1000
    sample.confirmation_wait_ms = waiting * 1000
    tool_steps = finished.tool_steps()
    sample.status = finished.status
    sample.turns = finished.turns or 0
    sample.tool_calls = len(tool_steps)
    sample.tools = [s.name for s in tool_steps]
    sample.tool_errors = sum(1 for s in tool_steps if s.failed)
    sample.prompt_tokens = finished.prompt_tokens
    sample.output_tokens = finished.completion_tokens
    sample.session_id = finished.session_id
    sample.call_prompt_tokens = [
        s.prompt_tokens for s in finished.steps or [] if s.type == StepKind.MODEL
    ]
    sample.request_tokens = tokens.message_tokens({"role": "user", "content": text})
    return sample


def _worded(error: RunRefused | StreamEnded) -> HttpError:
    """A run that went wrong, in the words this client's errors have always had (the raw
    log's errors, and summary.json's examples of them)."""
    if isinstance(error, StreamEnded):
        return HttpError("the stream ended before run.finished")
    request, data = error.request, error.text.encode()
    return HttpError(f"{request.method} {request.path}: HTTP {error.status}: {data[:300]!r}")
