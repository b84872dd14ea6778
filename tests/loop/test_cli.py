"""The terminal client's lines: a step that did its job is ✓ whatever outcome it names, as
everywhere else (common.contract.step_failed)."""

from __future__ import annotations

import pytest

from common.contract import StepKind, StepOutcome
from common.runs_protocol import ToolFinished
from loop.cli import describe
from loop.engine import Step


def finished_step(error: StepOutcome | None) -> ToolFinished:
    step = Step(StepKind.TOOL, "update_leave_status", "2026-05-04T09:30:12+00:00", 30_012.0)
    step.error = error
    return ToolFinished(tool_call_id="c1", name=step.name, step=step)


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (None, "   ✓ 30012 ms"),
        # a write that timed out and that the read-back shows applied: done, not failed
        (StepOutcome.TIMEOUT_APPLIED, "   ✓ 30012 ms  timeout_applied"),
        (StepOutcome.TIMEOUT_OUTCOME_UNKNOWN, "   ✗ 30012 ms  timeout_outcome_unknown"),
        (StepOutcome.TOOL_ERROR, "   ✗ 30012 ms  tool_error"),
    ],
)
def test_a_tool_step_is_marked_failed_only_when_it_did_not_do_its_job(error, line):
    assert describe(finished_step(error)) == line
