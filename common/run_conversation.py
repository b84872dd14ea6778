"""How a client runs a conversation with the loop's runs API, without any I/O: the one place
that knows it. Start a streamed run, read its events as the protocol's models, ask a policy
what to answer each question and send that answer, end at run.finished.

A `Conversation` never touches a socket: it says what it needs next (a command) and is told
what came of it, so one conversation serves every transport (sans-IO). Two carry it out:

- `common.run_client.RunClient`: httpx2 under asyncio (the terminal client, the demo, the
  release gate, the tests);
- `loadtest.client.TimedRunClient`: the standard library's http.client, cooperative under
  Locust's gevent, every read stamped with `perf_counter()` as it arrives (the load test's
  timing; Locust's own clients buffer).

The commands, and what the transport answers each with (`Conversation.next`):

    Open(request)    send the request that starts the run    → its status
    Rest()           the rest of that response, whole         → its text
    Read()           the stream's next event                  → an sse.Event, None at its end
    Show(event, at)  an event for the client's listener        → None
    Ask(question)    the policy's answer to a question        → a ConfirmAction, None: unanswered
    Send(request)    a request beside the stream (an answer)  → its Response
    Done(final)      the run finished: the last command

Only the protocol (common/runs_protocol.py) and the SSE reader are imported, so a client that
has neither httpx2 nor asyncio (the load test's workers) runs the same conversation.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Literal, assert_never

from .runs_protocol import (
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
    WaitingConfirmation,
    parse_event,
)

RUNS = "/v1/runs"

# How a client answers a question the run asks: an action, or None to leave it unanswered.
Policy = Callable[[WaitingConfirmation], ConfirmAction | None]


def always(action: ConfirmAction | None) -> Policy:
    """The policy that answers every question alike (None: none is answered)."""

    def answer(_question: WaitingConfirmation) -> ConfirmAction | None:
        return action

    return answer


@dataclass(frozen=True)
class Request:
    method: Literal["GET", "POST"]
    path: str  # under the client's base URL
    body: dict[str, Any] | None = None  # sent as JSON


@dataclass(frozen=True)
class Response:
    status: int
    text: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class RunRefused(Exception):
    """The loop did not start the run (an error status)."""

    def __init__(self, status: int, text: str, request: Request | None = None) -> None:
        self.status, self.text = status, text
        self.request = request or Request("POST", RUNS)
        super().__init__(self._describe())

    def _describe(self) -> str:
        return f"the loop answered {self.status}: {self.text[:200]}"


class ReplyRefused(RunRefused):
    """The loop did not take an answer to a confirmation (an error status)."""

    def _describe(self) -> str:
        return f"the loop answered {self.status} to {self.request.path}: {self.text[:200]}"


class StreamEnded(Exception):
    """The stream ended before run.finished (its loop stopped): follow the run by its id."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"the stream of run {run_id or '?'} ended without run.finished")
        self.run_id = run_id


def start_request(
    text: str,
    *,
    session_id: str | None = None,
    run_id: str | None = None,
    confirm: ConfirmMode | None = None,
    stream: bool,
) -> Request:
    body: dict[str, Any] = {"input": text, "stream": stream}
    for name, value in (("session_id", session_id), ("run_id", run_id), ("confirm", confirm)):
        if value is not None:
            body[name] = value
    return Request("POST", RUNS, body)


def reply_request(
    run_id: str,
    confirmation_id: str,
    action: ConfirmAction,
    content: dict[str, Any] | None = None,
) -> Request:
    body: dict[str, Any] = {"action": action}
    if content is not None:
        body["content"] = content
    return Request("POST", f"{RUNS}/{run_id}/confirmations/{confirmation_id}", body)


def check_reply(request: Request, response: Response, tolerate_gone: bool = False) -> None:
    """ReplyRefused unless the answer was taken. `tolerate_gone`: a 409 (answered already) or
    a 404 (no loop holds the question now; a restarting one takes it over, and following the
    run asks it again) is not an error."""
    if response.ok or (tolerate_gone and response.status in (404, 409)):
        return
    raise ReplyRefused(response.status, response.text, request)


# -- the commands -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Open:
    request: Request


@dataclass(frozen=True)
class Rest:
    pass


@dataclass(frozen=True)
class Read:
    pass


@dataclass(frozen=True)
class Show:
    event: RunEvent
    at: float  # when the bytes that completed it arrived (a perf_counter), if the reader stamps


@dataclass(frozen=True)
class Ask:
    question: ConfirmationRequested


@dataclass(frozen=True)
class Send:
    request: Request


@dataclass(frozen=True)
class Done:
    final: RunFinished


Command = Open | Rest | Read | Show | Ask | Send | Done
_READ = Read()


class Conversation:
    """One streamed run, start to run.finished, its questions answered by the policy the
    transport asks (Ask); RunRefused if the loop does not start it, ReplyRefused if it does
    not take an answer, StreamEnded if the stream ends before run.finished, ProtocolError if
    a known event does not fit its model. Events this client does not know (a newer loop's)
    are skipped."""

    def __init__(
        self,
        text: str,
        *,
        session_id: str | None = None,
        run_id: str | None = None,
        confirm: ConfirmMode | None = None,
        tolerate_gone: bool = False,
    ) -> None:
        self.request = start_request(
            text, session_id=session_id, run_id=run_id, confirm=confirm, stream=True
        )
        self.run_id = run_id or ""
        self.tolerate_gone = tolerate_gone
        self._final: RunFinished | None = None
        self._script = self._steps()

    def next(self, outcome: Any = None) -> Command:
        """The next command, given what came of the last one (None before the first)."""
        return self._script.send(outcome)

    @property
    def final(self) -> RunFinished:
        """The finished run (once Done)."""
        if self._final is None:
            raise RuntimeError("the conversation has not finished")
        return self._final

    def _steps(self) -> Generator[Command, Any, None]:
        status = yield Open(self.request)
        if status != 200:
            raise RunRefused(status, (yield Rest()), self.request)
        while (raw := (yield _READ)) is not None:
            event = parse_event(raw.event, raw.data)
            if event is None:
                continue
            yield Show(event, raw.at)
            match event:
                case RunStarted():
                    self.run_id = event.id
                case ConfirmationRequested():
                    action = yield Ask(event)
                    if action is not None:
                        request = reply_request(self.run_id, event.confirmation_id, action)
                        check_reply(request, (yield Send(request)), self.tolerate_gone)
                case RunFinished():
                    self._final = event
                    yield Done(event)
                    return
                case (
                    ModelStarted()
                    | AnswerDelta()
                    | ModelFinished()
                    | ToolStarted()
                    | ToolFinished()
                    | Detection()
                    | ConfirmationResolved()
                ):
                    pass
                case _:
                    assert_never(event)
        raise StreamEnded(self.run_id)
