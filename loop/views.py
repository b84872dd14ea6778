"""A run as the loop shows it, built from our own values (a stored record, a run just finished
or still running). The models themselves are the runs protocol's (common/runs_protocol.py),
which the clients read back; built here without validation, as the values are ours.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from common.runs_protocol import (
    RUNNING,
    Run,
    RunReason,
    RunStatus,
    RunSummary,
    Step,
    Usage,
    WaitingConfirmation,
)

from .claim_check import claims_unverified

if TYPE_CHECKING:
    from .store import RunRecord


def running_summary(
    run_id: str, session_id: str, user_input: str, created_at: dt.datetime
) -> RunSummary:
    """A run of this loop that has not finished (it may not be stored yet)."""
    return RunSummary.model_construct(**_running(run_id, session_id, user_input, created_at))


def summary_of_record(record: RunRecord) -> RunSummary:
    return RunSummary.model_construct(**_summary(record))


def running_run(
    run_id: str,
    session_id: str,
    user_input: str,
    created_at: dt.datetime,
    confirmations: Sequence[dict[str, Any]] = (),
) -> Run:
    waiting = [WaitingConfirmation.model_validate(c) for c in confirmations]
    return Run.model_construct(
        **_running(run_id, session_id, user_input, created_at), confirmations=waiting
    )


def run_of_record(record: RunRecord, steps: list[Step] | None = None) -> Run:
    """The run its record holds; `steps`: the steps themselves, when the caller has them
    (a run that has just finished), rather than read back from the record's JSON."""
    if steps is None:
        steps = [Step.from_dict(saved) for saved in record.steps or []]
    return Run.model_construct(
        **_summary(record),
        claims_unverified=None
        if record.status == RUNNING
        else claims_unverified(record.answer, steps),
        answer=record.answer,
        result=record.result,
        steps=steps,
        usage=Usage.model_construct(
            prompt_tokens=record.prompt_tokens or 0,
            completion_tokens=record.completion_tokens or 0,
        ),
        turns=record.turns or 0,
        confirmation_wait_ms=round(sum(step.confirmation_wait_ms for step in steps), 3),
    )


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
        # typed whichever version stored it (reasons were plain strings before)
        "reason": None if record.reason is None else RunReason.parse(record.reason),
        "created_at": record.created_at.isoformat() if record.created_at else None,
        "finished_at": record.finished_at.isoformat() if record.finished_at else None,
    }
