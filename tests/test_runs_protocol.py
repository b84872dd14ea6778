"""The runs protocol (common/runs_protocol.py): reasons read back typed whichever version wrote
them, events that round-trip between the server's writer and a client's parser, and an event a
client does not know skipped rather than an error."""

from __future__ import annotations

import pytest

from common import sse
from common.contract import StepKind, StepOutcome
from common.runs_protocol import (
    EVENTS,
    ConfirmationOutcome,
    ConfirmationRequested,
    ConfirmationResolved,
    ModelFinished,
    ProtocolError,
    RunFinished,
    RunReason,
    RunReasonCode,
    RunStarted,
    RunStatus,
    Step,
    ToolFinished,
    parse_event,
)
from loop.store import RunRecord
from loop.views import run_of_record

# Reasons as runs stored before reasons were typed hold them (and as they are still written).
OLD_REASONS = [
    ("max_turns", RunReasonCode.MAX_TURNS, None),
    ("cancelled", RunReasonCode.CANCELLED, None),
    (
        "cancelled: the confirmation was not answered within 120 s",
        RunReasonCode.CANCELLED,
        "the confirmation was not answered within 120 s",
    ),
    ("context_overflow: 9000 > 8192", RunReasonCode.CONTEXT_OVERFLOW, "9000 > 8192"),
    (
        "model_error: http_500 after 3 attempts",
        RunReasonCode.MODEL_ERROR,
        "http_500 after 3 attempts",
    ),
    (
        "tools_unavailable: MCP connection lost: Connection closed",
        RunReasonCode.TOOLS_UNAVAILABLE,
        "MCP connection lost: Connection closed",
    ),
    ("sign_in_refused: 401", RunReasonCode.SIGN_IN_REFUSED, "401"),
    (
        "outcome_unknown: update_leave_status（LV-1） timed out after 30 s; then 仍是草稿",
        RunReasonCode.OUTCOME_UNKNOWN,
        "update_leave_status（LV-1） timed out after 30 s; then 仍是草稿",
    ),
    ("tool_call_in_content", RunReasonCode.TOOL_CALL_IN_CONTENT, None),
    ("length", RunReasonCode.LENGTH, None),
    (
        "stop tool arguments: Expecting value: line 1 column 1 (char 0)",
        RunReasonCode.STOP_TOOL_ARGUMENTS,
        "Expecting value: line 1 column 1 (char 0)",
    ),
    (
        "interrupted: the loop service running it stopped during the run",
        RunReasonCode.INTERRUPTED,
        "the loop service running it stopped during the run",
    ),
    ("internal: OSError", RunReasonCode.INTERNAL, "OSError"),
    ("ValueError: boom", RunReasonCode.EXCEPTION, "ValueError: boom"),
    ("RuntimeError", RunReasonCode.EXCEPTION, "RuntimeError"),
]


@pytest.mark.parametrize(("text", "code", "detail"), OLD_REASONS)
def test_a_stored_reason_reads_back_typed_and_is_written_as_it_was(text, code, detail):
    reason = RunReason.parse(text)
    assert (reason.code, reason.detail) == (code, detail)
    assert str(reason) == text


def test_every_reason_code_is_one_an_old_string_reads_as():
    assert {code for _, code, _ in OLD_REASONS} == set(RunReasonCode)


def test_the_trace_error_type_is_the_code_or_the_exception_type():
    assert RunReason.parse("model_error: http_500").error_type == "model_error"
    assert RunReason.parse("ValueError: boom").error_type == "ValueError"


def test_a_run_stored_by_an_older_version_is_served_with_its_reason_typed():
    record = RunRecord(
        id="run-old",
        user_key="u",
        session_id="s",
        status="failed",
        input="查一下",
        reason="tools_unavailable: MCP connection lost",
        steps=[],
    )
    run = run_of_record(record)
    assert run.reason == RunReason(RunReasonCode.TOOLS_UNAVAILABLE, "MCP connection lost")
    served = run.model_dump_json()
    assert '"reason":"tools_unavailable: MCP connection lost"' in served
    back = RunFinished.model_validate_json(served)
    assert back.reason == run.reason and back.status == RunStatus.FAILED


def _step() -> Step:
    step = Step(StepKind.TOOL, "search_leaves", "2026-05-04T09:30:12+00:00", 1.5)
    step.end(StepOutcome.TIMEOUT_APPLIED)
    return step


def test_events_written_by_the_server_parse_back_as_the_same_models():
    events = [
        RunStarted.model_construct(id="run-1", session_id="ses-1"),
        ToolFinished.model_construct(tool_call_id="c1", name="search_leaves", step=_step()),
        ModelFinished.model_construct(turn=2, error="http_500 after 3 attempts"),
        ConfirmationRequested.model_construct(
            confirmation_id="cf_1", message="確定？", schema_={"type": "object"}
        ),
        ConfirmationResolved.model_construct(
            outcome=ConfirmationOutcome.DECLINED, message="確定？"
        ),
    ]
    frames = b"".join(sse.frame(e.data(), e.event) for e in events)
    parsed = [parse_event(e.event, e.data) for e in sse.Parser().feed(frames)]
    assert [type(p) for p in parsed] == [type(e) for e in events]
    assert parsed[1].step.error == StepOutcome.TIMEOUT_APPLIED  # type: ignore[union-attr]
    assert parsed[2].step is None and parsed[2].error  # type: ignore[union-attr]
    assert parsed[3].schema_ == {"type": "object"}  # type: ignore[union-attr]
    # the data carries the payload only, as it always has: the name is the `event:` line
    assert '"event"' not in events[0].data()
    assert '"step"' not in events[2].data()


def test_an_event_a_client_does_not_know_is_skipped_not_an_error():
    assert parse_event("tool.progress", '{"percent": 50}') is None
    assert parse_event("run.started", '{"id": "r", "session_id": "s", "new": 1}') == RunStarted(
        id="r", session_id="s"
    )


def test_a_known_event_that_does_not_fit_its_model_is_a_protocol_error():
    with pytest.raises(ProtocolError):
        parse_event("run.started", '{"session_id": "s"}')


def test_every_event_model_is_named_by_its_event_field():
    for name, model in EVENTS.items():
        assert model.model_fields["event"].default == name
