"""The runs protocol: what the loop's runs API serves and what its clients read back.

One module for both sides (the loop emits these events and serves these runs; the terminal
client, the demo, the gate, the load test and the tests parse them), so that adding an event,
a reason or an outcome is a change here that mypy then walks through everywhere: clients
branch on events with an exhaustive `match` ending in `assert_never`.

Only pydantic and the shared vocabulary (common/contract.py) are imported: no web framework and
none of the loop's server code, so any client can use it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
)

from .contract import StepKind, StepOutcome, step_failed

# -- how a run ended ------------------------------------------------------------------------


class RunStatus(StrEnum):
    """How a run ended (a stored run is also "running" until then)."""

    COMPLETED = "completed"
    MAX_TURNS = "max_turns"
    FAILED = "failed"
    CANCELLED = "cancelled"


RUNNING = "running"
RecordStatus = Literal["running"] | RunStatus


class RunReasonCode(StrEnum):
    """Why a run ended as it did (a run's `reason` is `code` or `code: detail`)."""

    MAX_TURNS = "max_turns"
    CANCELLED = "cancelled"  # detail: why, when not by the person (a confirmation expired)
    CONTEXT_OVERFLOW = "context_overflow"
    MODEL_ERROR = "model_error"
    TOOLS_UNAVAILABLE = "tools_unavailable"
    SIGN_IN_REFUSED = "sign_in_refused"
    OUTCOME_UNKNOWN = "outcome_unknown"  # a write timed out and a read-back did not show it
    TOOL_CALL_IN_CONTENT = "tool_call_in_content"  # a detection
    LENGTH = "length"  # a detection: the answer hit max_tokens
    # With spaces: the stored format of runs written before reasons were typed.
    STOP_TOOL_ARGUMENTS = "stop tool arguments"
    INTERRUPTED = "interrupted"  # its loop stopped during the run
    INTERNAL = "internal"  # the loop failed outside the engine (the store): detail names it
    # Anything else the engine caught: written as the exception's "Type: message", no code.
    EXCEPTION = "exception"


_REASON_CODES = frozenset(RunReasonCode)


@dataclass(frozen=True)
class RunReason:
    code: RunReasonCode
    detail: str | None = None

    def __str__(self) -> str:
        """The served and stored form (unchanged since reasons were plain strings)."""
        if self.code == RunReasonCode.EXCEPTION:
            return self.detail or self.code
        return self.code if self.detail is None else f"{self.code}: {self.detail}"

    @classmethod
    def parse(cls, text: str) -> RunReason:
        """A served or stored reason, whichever version wrote it; never raises (a reason
        with no known code is what the engine writes for an exception)."""
        code, colon, detail = text.partition(": ")
        if code in _REASON_CODES and code != RunReasonCode.EXCEPTION:
            return cls(RunReasonCode(code), detail if colon else None)
        return cls(RunReasonCode.EXCEPTION, text)

    @property
    def error_type(self) -> str:
        """What a trace's `error.type` says: the code, or the exception's type."""
        if self.code == RunReasonCode.EXCEPTION:
            return (self.detail or self.code).split(":", 1)[0]
        return self.code


def _reason(value: Any) -> RunReason:
    if isinstance(value, RunReason):
        return value
    if isinstance(value, str):
        return RunReason.parse(value)
    raise ValueError("a run's reason is a string")


# A reason in a served run: the string on the wire, a RunReason in Python.
Reason = Annotated[
    RunReason,
    PlainValidator(_reason),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "description": "`code` or `code: detail` (RunReasonCode)."}),
]


class ConfirmationOutcome(StrEnum):
    """What a confirmation came to (confirmation.resolved, leave_loop_confirmations_total)."""

    ACCEPTED = "accepted"
    DECLINED = "declined"
    CANCELLED = "cancelled"  # answered cancel, unanswered in time, or the run cancelled


class ToolCallOutcome(StrEnum):
    """How the loop's call to the MCP server went (leave_loop_tool_call_duration_seconds)."""

    OK = "ok"
    TOOL_ERROR = "tool_error"
    ERROR = "error"
    UNAVAILABLE = "unavailable"
    SIGN_IN_REFUSED = "sign_in_refused"


class DetectionKind(StrEnum):
    """A misconfiguration the loop recognised in the model's output."""

    TOOL_CALL_IN_CONTENT = "tool_call_in_content"
    LENGTH = "length"


# How a client answers a confirmation (POST /v1/runs/{id}/confirmations/{confirmation_id}).
ConfirmAction = Literal["accept", "decline", "cancel"]
# How a run's confirmations are answered: by the client (an event asks), or all alike.
ConfirmMode = Literal["ask", "accept", "decline"]


# -- a run's steps --------------------------------------------------------------------------


@dataclass(eq=False)  # a step is itself, not its values: the run keeps its open ones by identity
class Step:
    type: StepKind
    name: str
    started_at: str
    duration_ms: float = 0.0
    arguments: Any = None
    result: Any = None
    error: StepOutcome | None = None
    detail: str | None = None  # the reason, where the outcome has one
    tool_call_id: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Of duration_ms, the time a person took to answer the call's confirmation question: the
    # run-latency SLO leaves it out.
    confirmation_wait_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        # Shallow: arguments and results are never changed once set, and asdict's deep copy
        # of every result, for every event and save, was a measurable share of a run's CPU.
        return {name: getattr(self, name) for name in STEP_FIELDS}

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> Step:
        """A step as saved (to_dict's JSON). One saved before outcomes were a closed set has
        its reason in `error` ("unavailable: …", "ValueError: …", a model's or a detection's
        text): read as the outcome it meant, the text as its detail."""
        step = cls(**{name: saved[name] for name in STEP_FIELDS if name in saved})
        step.type = StepKind(step.type)
        if step.error is not None and step.error not in _OUTCOMES:
            step.error, step.detail = _legacy_outcome(step.type, step.error)
        elif step.error is not None:
            step.error = StepOutcome(step.error)
        return step

    @property
    def failed(self) -> bool:
        return step_failed(self.error)

    def refusal(self) -> str | None:
        """The code the MCP server refused the call with (a RefusalCode, or another server's),
        for a tool step that came back as a tool error; "unknown" when it gave none."""
        if self.error != StepOutcome.TOOL_ERROR:
            return None
        error = self.result.get("error") if isinstance(self.result, dict) else None
        code = error.get("code") if isinstance(error, dict) else None
        return str(code or "unknown")

    def end(self, outcome: StepOutcome, detail: str | None = None) -> None:
        self.error, self.detail = outcome, detail


STEP_FIELDS = tuple(f.name for f in fields(Step))
_OUTCOMES = frozenset(StepOutcome)


def _legacy_outcome(kind: StepKind, error: str) -> tuple[StepOutcome, str]:
    code, _, detail = error.partition(": ")
    if code in _OUTCOMES:
        return StepOutcome(code), detail
    if kind == StepKind.MODEL:
        return StepOutcome.MODEL_ERROR, error
    if kind == StepKind.DETECTION:
        return StepOutcome.DETECTED, error
    return StepOutcome.EXCEPTION, error


# -- a run ----------------------------------------------------------------------------------


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int


class RunSummary(BaseModel):
    """A run as `GET /v1/runs` lists it."""

    id: str
    status: RecordStatus
    session_id: str
    input: str
    reason: Reason | None = None
    created_at: str | None = None
    finished_at: str | None = None


class WaitingConfirmation(BaseModel):
    """A question a running run waits on; answered at
    POST /v1/runs/{id}/confirmations/{confirmation_id}."""

    model_config = ConfigDict(serialize_by_alias=True, validate_by_name=True)

    confirmation_id: str
    message: str
    schema_: dict[str, Any] = Field(alias="schema", description="What an answer may hold.")


class Run(RunSummary):
    """A run whole; what it has not done yet is null while it runs."""

    confirmations: list[WaitingConfirmation] | None = Field(
        None,
        description="While it runs: the confirmations it waits on (also after the loop that "
        "asked restarted: answering one then lets the run go on).",
    )
    claims_unverified: list[str] | None = Field(
        None,
        description=(
            "A finished run: the leave statuses its answer claims a change to that none of "
            'its own successful tool calls made (e.g. ["submitted"] for 「已送出審核」 with '
            "nothing submitted); empty when every claim is backed. Such runs are counted "
            "(leave_loop_claims_unverified_total) and left out of the training export."
        ),
    )
    answer: str | None = None
    result: Any = Field(None, description="The stop tool's arguments, when a stop tool ended it.")
    steps: list[Step] | None = None
    usage: Usage | None = None
    turns: int | None = None
    confirmation_wait_ms: float | None = Field(
        None,
        description="Of the run's time, how long it waited for a person to answer its "
        "confirmation questions (the steps' confirmation_wait_ms, summed).",
    )

    def tool_steps(self) -> list[Step]:
        return [s for s in self.steps or [] if s.type == StepKind.TOOL]

    def tools(self) -> list[str]:
        """The tools the model called, in order."""
        return [s.name for s in self.tool_steps()]

    @property
    def prompt_tokens(self) -> int:
        return self.usage.prompt_tokens if self.usage else 0

    @property
    def completion_tokens(self) -> int:
        return self.usage.completion_tokens if self.usage else 0


class RunList(BaseModel):
    runs: list[RunSummary] = Field(description="The caller's runs, newest first.")


# -- the events of a streamed run (POST /v1/runs with "stream": true) -------------------------
# Each is one Server-Sent Event: `event:` its name, `data:` its other fields as JSON.

EVENT_DOC = "The event's name: the SSE `event:` line (not repeated in `data`)."


class _Event(BaseModel):
    def data(self) -> str:
        """The event's `data:` (its JSON)."""
        return self.model_dump_json()


class RunStarted(_Event):
    event: Literal["run.started"] = Field("run.started", exclude=True, description=EVENT_DOC)
    id: str
    session_id: str


class ModelStarted(_Event):
    event: Literal["model.started"] = Field("model.started", exclude=True, description=EVENT_DOC)
    turn: int


class AnswerDelta(_Event):
    """Text of the answer as the model writes it (never the start of a tool call)."""

    event: Literal["answer.delta"] = Field("answer.delta", exclude=True, description=EVENT_DOC)
    text: str


class ModelFinished(_Event):
    """The model's turn: its step, or (no step) the error that ended it."""

    event: Literal["model.finished"] = Field("model.finished", exclude=True, description=EVENT_DOC)
    turn: int
    step: Step | None = None
    error: str | None = None

    def data(self) -> str:
        # one or the other, as ever: a client tells them apart by which is there
        return self.model_dump_json(exclude={"error"} if self.error is None else {"step"})


class ToolStarted(_Event):
    event: Literal["tool.started"] = Field("tool.started", exclude=True, description=EVENT_DOC)
    tool_call_id: str
    name: str
    arguments: Any


class ToolFinished(_Event):
    event: Literal["tool.finished"] = Field("tool.finished", exclude=True, description=EVENT_DOC)
    tool_call_id: str
    name: str
    step: Step


class Detection(_Event):
    event: Literal["detection"] = Field("detection", exclude=True, description=EVENT_DOC)
    kind: DetectionKind
    detail: str


class ConfirmationRequested(WaitingConfirmation, _Event):
    """The run waits for the client's answer to this question."""

    event: Literal["confirmation.requested"] = Field(
        "confirmation.requested", exclude=True, description=EVENT_DOC
    )


class ConfirmationResolved(_Event):
    event: Literal["confirmation.resolved"] = Field(
        "confirmation.resolved", exclude=True, description=EVENT_DOC
    )
    outcome: ConfirmationOutcome
    message: str
    confirmation_id: str | None = Field(
        None,
        description="The question's id when a person was asked (confirmation.requested); null "
        "when the run's `confirm` setting, or an answer given before the loop restarted, "
        "answered it.",
    )


class RunFinished(Run, _Event):
    """The last event: the run itself, as GET /v1/runs/{id} gives it."""

    event: Literal["run.finished"] = Field("run.finished", exclude=True, description=EVENT_DOC)

    @classmethod
    def of(cls, run: Run) -> RunFinished:
        return cls.model_construct(**dict(run))


RunEvent = (
    RunStarted
    | ModelStarted
    | AnswerDelta
    | ModelFinished
    | ToolStarted
    | ToolFinished
    | Detection
    | ConfirmationRequested
    | ConfirmationResolved
    | RunFinished
)
EVENT_TYPES: tuple[type[_Event], ...] = (
    RunStarted,
    ModelStarted,
    AnswerDelta,
    ModelFinished,
    ToolStarted,
    ToolFinished,
    Detection,
    ConfirmationRequested,
    ConfirmationResolved,
    RunFinished,
)
EVENTS: dict[str, type[_Event]] = {m.model_fields["event"].default: m for m in EVENT_TYPES}
# The stream's schema, for the OpenAPI document: one of the events, by name.
EVENT_SCHEMA: TypeAdapter[RunEvent] = TypeAdapter(Annotated[RunEvent, Field(discriminator="event")])


class ProtocolError(Exception):
    """A known event whose data does not fit its model."""


def parse_event(name: str, data: str) -> RunEvent | None:
    """A streamed run's event, typed; None for an event this client does not know (a newer
    server's): skipped, so that adding an event never breaks an older client."""
    model = EVENTS.get(name)
    if model is None:
        return None
    try:
        event = model.model_validate_json(data)
    except ValidationError as error:
        raise ProtocolError(f"{name}: {error}") from error
    return event  # type: ignore[return-value]  # EVENTS holds exactly RunEvent's members
