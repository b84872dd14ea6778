"""A run as the loop shows it: declared once, for the runs API (a run's answer, its record, the
listing), the `run.finished` event, the chat facade and the export.

Built from our own values (a stored record, a run just finished or still running), so without
validation: pydantic gives the schema the OpenAPI document lists and the JSON on the wire.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .engine import RunStatus, Step

if TYPE_CHECKING:
    from .store import RunRecord

RUNNING = "running"
RecordStatus = Literal["running"] | RunStatus


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int


class RunSummary(BaseModel):
    """A run as `GET /v1/runs` lists it."""

    id: str
    status: RecordStatus
    session_id: str
    input: str
    reason: str | None = None
    created_at: str | None = None
    finished_at: str | None = None

    @classmethod
    def running(
        cls, run_id: str, session_id: str, user_input: str, created_at: dt.datetime
    ) -> RunSummary:
        """A run of this loop that has not finished (it may not be stored yet)."""
        return cls.model_construct(**_running(run_id, session_id, user_input, created_at))

    @classmethod
    def of_record(cls, record: RunRecord) -> RunSummary:
        return cls.model_construct(**_summary(record))


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
    answer: str | None = None
    result: Any = Field(None, description="The stop tool's arguments, when a stop tool ended it.")
    steps: list[Step] | None = None
    usage: Usage | None = None
    turns: int | None = None

    @classmethod
    def running(
        cls,
        run_id: str,
        session_id: str,
        user_input: str,
        created_at: dt.datetime,
        confirmations: Sequence[dict[str, Any]] = (),
    ) -> Run:
        waiting = [WaitingConfirmation.model_validate(c) for c in confirmations]
        return cls.model_construct(
            **_running(run_id, session_id, user_input, created_at), confirmations=waiting
        )

    @classmethod
    def of_record(cls, record: RunRecord, steps: list[Step] | None = None) -> Run:
        """The run its record holds; `steps`: the steps themselves, when the caller has them
        (a run that has just finished), rather than read back from the record's JSON."""
        if steps is None:
            steps = [Step.from_dict(saved) for saved in record.steps or []]
        return cls.model_construct(
            **_summary(record),
            answer=record.answer,
            result=record.result,
            steps=steps,
            usage=Usage.model_construct(
                prompt_tokens=record.prompt_tokens or 0,
                completion_tokens=record.completion_tokens or 0,
            ),
            turns=record.turns or 0,
        )


class RunList(BaseModel):
    runs: list[RunSummary] = Field(description="The caller's runs, newest first.")


def _running(
    run_id: str, session_id: str, user_input: str, created_at: dt.datetime
) -> dict[str, Any]:
    return {
        "id": run_id,
        "status": RUNNING,
        "session_id": session_id,
        "input": user_input,
        "created_at": created_at.isoformat(),
    }


def _summary(record: RunRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "status": record.status if record.status == RUNNING else RunStatus(record.status),
        "session_id": record.session_id,
        "input": record.input,
        "reason": record.reason,
        "created_at": record.created_at.isoformat() if record.created_at else None,
        "finished_at": record.finished_at.isoformat() if record.finished_at else None,
    }
