"""The words the services share: what the MCP server publishes and accepts, what the agent loop
writes into a conversation, and what the model simulator reads back from one.

Each lives here once, so that a change to one is a change for all of them
(tests/test_contract.py checks that they still agree).
"""

from __future__ import annotations

from enum import StrEnum

# The agent's default system prompt (the load generator's conversations start with it too).
SYSTEM_PROMPT = (
    "你是差勤助手。更新假單前必須先查詢取得真實 ID；"
    "假單狀態只能逐級推進；使用者拒絕後不得改用其他工具達成。"
)

# The loop starts every failed tool result it hands the model with this; a model (and the
# simulator) reads a result that starts with it as "that did not happen".
TOOL_ERROR_PREFIX = "[工具執行失敗]"


class ToolName(StrEnum):
    """The leave tools, by the names the fine-tuned model was trained on."""

    SEARCH_LEAVES = "search_leaves"
    GET_LEAVE_BALANCE = "get_leave_balance"
    CREATE_LEAVE = "create_leave"
    UPDATE_LEAVE_STATUS = "update_leave_status"
    CANCEL_APPROVED_LEAVE = "cancel_approved_leave"


class LeaveStatus(StrEnum):
    DRAFT = "draft"
    SUBMITTED = "submitted"
    APPROVED = "approved"
    REJECTED = "rejected"
    CANCELLED = "cancelled"


class RefusalCode(StrEnum):
    """Why the MCP server refused a tool call: the `code` of a refused call's
    `structuredContent.error` (never translated; mcp_server/messages.py has the texts)."""

    UNKNOWN_LEAVE_ID = "unknown_leave_id"
    WRONG_STEP = "wrong_step"
    USE_CANCEL_TOOL = "use_cancel_tool"
    NOT_CANCELLABLE = "not_cancellable"
    FORBIDDEN = "forbidden"
    CONFLICT = "conflict"
    INVALID_STATUS = "invalid_status"
    INVALID_DATE = "invalid_date"
    END_BEFORE_START = "end_before_start"
    NO_WORKING_DAYS = "no_working_days"
    OVERLAP = "overlap"
    KEYWORD_TOO_LONG = "keyword_too_long"
    INVALID_LEAVE_TYPE = "invalid_leave_type"
    INVALID_REASON = "invalid_reason"
    INSUFFICIENT_BALANCE = "insufficient_balance"
    CONFIRMATION_DECLINED = "confirmation_declined"
    CONFIRMATION_CANCELLED = "confirmation_cancelled"
    UNKNOWN_TOOL = "unknown_tool"
    INVALID_ARGUMENTS = "invalid_arguments"
    INTERNAL_ERROR = "internal_error"


# The refusals that are the person's answer to a confirmation, not a rule the call broke.
PERSON_SAID = frozenset({RefusalCode.CONFIRMATION_DECLINED, RefusalCode.CONFIRMATION_CANCELLED})


# The one-step moves update_leave_status makes: a status → the statuses it may go to next.
# An approved leave leaves only through cancel_approved_leave, after the user confirms.
# Keyed by status value: a LeaveStatus or the plain string a database row or a JSON body holds.
NEXT_STATUSES: dict[str, tuple[LeaveStatus, ...]] = {
    LeaveStatus.DRAFT: (LeaveStatus.SUBMITTED,),
    LeaveStatus.SUBMITTED: (LeaveStatus.APPROVED, LeaveStatus.REJECTED),
}

# Canonical leave type → the other names a model or a person may use for it.
LEAVE_TYPES: dict[str, tuple[str, ...]] = {
    "特休": ("annual", "特別休假", "年假", "vacation"),
    "病假": ("sick",),
    "事假": ("personal",),
    "補休": ("compensatory", "comp"),
}
# Every name of a leave type, case-folded → its canonical name.
LEAVE_TYPE_BY_NAME: dict[str, str] = {
    name.casefold(): canonical
    for canonical, aliases in LEAVE_TYPES.items()
    for name in (canonical, *aliases)
}


def canonical_leave_type(name: str) -> str | None:
    return LEAVE_TYPE_BY_NAME.get(name.strip().casefold())


# -- a run's steps, as the loop reports them (the runs API, its events, the stored record) -----


class StepKind(StrEnum):
    MODEL = "model"  # one chat completion
    TOOL = "tool"  # one tool call the model asked for
    VERIFY = "verify"  # a read-back of what a timed-out write was to change
    DETECTION = "detection"  # the run found a known misconfiguration (name: which)


class StepOutcome(StrEnum):
    """How a step ended, when not plainly (a step's `error`; None when it did what it was
    for). The reason, where there is one, is the step's `detail`."""

    IN_PROGRESS = "in_progress"  # started, not finished (a checkpoint taken meanwhile)
    INTERRUPTED = "interrupted"  # in progress when its loop stopped: it may have been applied
    CANCELLED = "cancelled"
    INVALID_ARGUMENTS = "invalid_arguments"  # not called: detail says why they do not parse
    UNKNOWN_TOOL = "unknown_tool"  # not called: no such tool
    TOOL_ERROR = "tool_error"  # the tool answered with an error (a refusal, say)
    TIMEOUT = "timeout"  # a read that did not answer in time
    TIMEOUT_OUTCOME_UNKNOWN = "timeout_outcome_unknown"  # a write, and a read-back did not show it
    TIMEOUT_APPLIED = "timeout_applied"  # a write that timed out, and a read-back shows it applied
    NOT_APPLIED_YET = "not_applied_yet"  # a read-back that does not show the write
    UNAVAILABLE = "unavailable"  # the tool server could not be reached: detail says how
    SIGN_IN_REFUSED = "sign_in_refused"  # the tool server refused the person's token: not called
    EXCEPTION = "exception"  # the call raised: detail names the exception
    MODEL_ERROR = "model_error"  # the model gave no answer: detail says why
    DETECTED = "detected"  # a detection step: detail says what was found


# Outcomes that still mean the step did what it was for: not counted as a tool error anywhere.
DONE_OUTCOMES = frozenset({StepOutcome.TIMEOUT_APPLIED})


def step_failed(error: str | None) -> bool:
    """Whether a step's `error` (a StepOutcome, or the plain string a JSON body holds) means
    it did not do what it was for."""
    return error is not None and error not in DONE_OUTCOMES
