"""The leave tools as an MCP server. Names are fixed: the fine-tuned model was trained on them."""

# No `from __future__ import annotations`: the SDK reads the tools' signatures at runtime.

import json
import logging
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Annotated, Any, cast

from mcp.server.mcpserver import (
    AcceptedElicitation,
    CancelledElicitation,
    Context,
    Elicit,
    ElicitationResult,
    MCPServer,
    RequestStateSecurity,
    Resolve,
)
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, InputRequiredResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from common.contract import LeaveStatus, RefusalCode, ToolName
from common.unicode import lone_surrogate_at, surrogate_message

from .auth import current_employee_id, current_front_end
from .leaves import MAX_KEYWORD_CHARS, MAX_KEYWORD_WORDS, LeaveService, LeaveStore
from .messages import CONFIRM_QUESTION, Refusal
from .metrics import UNKNOWN_TOOL_LABEL, ServerMetrics
from .schemas import BalanceResult, CancelResult, LeaveView, SearchResult, StatusChange

logger = logging.getLogger(__name__)
LOG_EXCERPT_CHARS = 300

SERVER_NAME = "leave-mcp"
INSTRUCTIONS = (
    "Leave and attendance tools. Always search_leaves to get a leave's real ID before changing "
    "it; statuses move one step at a time (draft → submitted → approved/rejected); cancelling "
    "an approved leave needs the user's confirmation, and after a decline do not try another way."
)


class CancelConfirmation(BaseModel):
    confirm: bool = Field(description="true to cancel the approved leave, false to keep it")


@dataclass(frozen=True)
class _Refused:
    """A resolver's answer when there is nothing to ask: the rule already said no."""

    refusal: Refusal


class _NotAuthenticated(Exception):
    pass


@dataclass(frozen=True)
class ToolContext:
    """What the tools work with, handed to them by the server's lifespan."""

    service: LeaveStore
    metrics: ServerMetrics
    language: str


def tool_context(ctx: Context) -> ToolContext:
    """The ToolContext build_server's lifespan yields (entered once per served app or client)."""
    return cast(ToolContext, ctx.request_context.lifespan_context)


class LeaveServer(MCPServer[ToolContext]):
    """The SDK's server, with the calls it refuses before a tool runs (an unknown name,
    arguments that fail the input schema) answered and counted as the rules' refusals are:
    with an error code, in the tool-call metrics. A model that sends malformed calls is what
    the dashboards are for."""

    def __init__(self, context: ToolContext, **kwargs: Any) -> None:
        super().__init__(SERVER_NAME, lifespan=lambda _server: nullcontext(context), **kwargs)
        self._context = context
        self._known = tuple(str(tool) for tool, *_ in TOOLS)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[ToolContext, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        where = lone_surrogate_at(arguments)
        if where is not None and name in self._known:
            # Valid JSON, not text: no column, log line or answer could hold it.
            refusal = Refusal(
                RefusalCode.INVALID_ARGUMENTS, tool=name, problems=surrogate_message(where)
            )
            return refused(self._context, name, refusal)
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise  # a crash: the SDK logs it and answers with a generic text
        except ToolError as error:
            return self._malformed(name, error)

    def _malformed(self, name: str, error: ToolError) -> CallToolResult:
        known = list(self._known)
        cause = error.__cause__
        if name not in known:
            logger.info("call to an unknown tool %s", log_excerpt(name))
            refusal = Refusal(RefusalCode.UNKNOWN_TOOL, tool=log_excerpt(name), valid=known)
            return refused(self._context, UNKNOWN_TOOL_LABEL, refusal)
        problems = _argument_problems(cause) if isinstance(cause, ValidationError) else str(error)
        logger.info("tool %s refused its arguments: %s", name, log_excerpt(problems))
        refusal = Refusal(RefusalCode.INVALID_ARGUMENTS, tool=name, problems=problems)
        return refused(self._context, name, refusal)


MAX_ARGUMENT_PROBLEMS = 5


def _argument_problems(error: ValidationError) -> str:
    """The fields and what is wrong with each, as pydantic says it (never the values given)."""
    problems = [
        f"{'.'.join(str(part) for part in e['loc']) or 'arguments'}: {e['msg']}"
        for e in error.errors(include_url=False, include_input=False)
    ]
    extra = len(problems) - MAX_ARGUMENT_PROBLEMS
    listed = "; ".join(problems[:MAX_ARGUMENT_PROBLEMS])
    return log_excerpt(listed + (f"; {extra} more" if extra > 0 else ""))


def build_server(
    service: LeaveService | LeaveStore,
    metrics: ServerMetrics,
    *,
    language: str = "zh-TW",
    elicitation_state_keys: Sequence[str] = (),
    confirmation_ttl_seconds: float = 600.0,
    token_verifier: Any = None,
    auth: Any = None,
) -> LeaveServer:
    # The service itself (the load generator, tests) is served through its async face;
    # create_app hands in the face it shares with the audit of abandoned confirmations.
    store = service if isinstance(service, LeaveStore) else LeaveStore(service)
    # An answer is accepted for `confirmation_ttl_seconds` after its question; after that the
    # question counts as abandoned (see LeaveService.audit_abandoned). The first key seals, all
    # open: a rotation keeps the confirmations asked under the old key answerable.
    security = (
        RequestStateSecurity(keys=list(elicitation_state_keys), ttl=confirmation_ttl_seconds)
        if elicitation_state_keys
        else RequestStateSecurity.ephemeral(ttl=confirmation_ttl_seconds)
    )
    server = LeaveServer(
        ToolContext(store, metrics, language),
        instructions=INSTRUCTIONS,
        version="0.1.0",
        token_verifier=token_verifier,
        auth=auth,
        request_state_security=security,
    )
    for name, tool, annotations, description in TOOLS:
        server.add_tool(tool, name=name, annotations=annotations, description=description)
    return server


def actor() -> str:
    employee_id = current_employee_id()
    if employee_id is None:
        raise _NotAuthenticated
    return employee_id


def ok(model: BaseModel) -> CallToolResult:
    data = model.model_dump(mode="json")
    # ValueError rather than inf or nan, which no JSON parser (the loop's included) takes
    text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def refused(context: ToolContext, tool: str, refusal: Refusal) -> CallToolResult:
    text = refusal.render(context.language)
    context.metrics.rule_refusals.labels(refusal.rule).inc()
    outcome = "declined" if refusal.rule == "declined" else "refused"
    context.metrics.tool_calls.labels(tool, outcome).inc()
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content={"error": {"code": refusal.code, "message": text}},
        is_error=True,
    )


def failed(
    context: ToolContext, tool: str, code: RefusalCode = RefusalCode.INTERNAL_ERROR
) -> CallToolResult:
    context.metrics.tool_calls.labels(tool, "error").inc()
    text = Refusal(code).render(context.language)
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content={"error": {"code": code, "message": text}},
        is_error=True,
    )


async def run(
    context: ToolContext, tool: str, work: Callable[[], Awaitable[BaseModel]]
) -> CallToolResult:
    """Await the tool's work (its store calls run where the store decides: see
    storage.AsyncStore); map its outcome to a tool result."""
    started = time.perf_counter()
    in_progress = context.metrics.tool_calls_in_progress.labels(tool)
    in_progress.inc()
    try:
        result = await work()
        answer = ok(result)  # in here: a value JSON cannot carry is an error like any other
    except Refusal as refusal:
        return refused(context, tool, refusal)
    except _NotAuthenticated:
        return failed(context, tool, RefusalCode.INTERNAL_ERROR)
    except Exception as error:
        # The client sees a generic text; the detail stays in the server log, bounded:
        # a database error's text can quote the caller's input at any length.
        logger.error(
            "tool %s failed: %s\n%s",
            tool,
            log_excerpt(f"{type(error).__name__}: {error}"),
            "".join(traceback.format_tb(error.__traceback__)),
        )
        return failed(context, tool)
    finally:
        in_progress.dec()
        context.metrics.tool_duration.labels(tool).observe(time.perf_counter() - started)
    context.metrics.tool_calls.labels(tool, "ok").inc()
    return answer


# -- the tools -------------------------------------------------------------------------------
# Descriptions are published byte for byte as the model was trained on them, indentation of
# the continuation lines included.

SEARCH_LEAVES_DESCRIPTION = (
    "Search your leave requests (a manager also sees their direct reports' requests).\n"
    "\n"
    "        Returns each leave's real ID (LV-xxxxxx), type, dates, days and hours, status, reason"
    " and\n"
    "        the status steps you may take next. Call this before changing any leave."
)


async def search_leaves(
    ctx: Context,
    keyword: Annotated[
        str,
        Field(
            description="Words to find in the leave's reason, type or dates, e.g. 家庭旅遊, "
            f"特休 or 2026-12 (at most {MAX_KEYWORD_WORDS} words, {MAX_KEYWORD_CHARS} "
            "characters). Use an empty string to list all leaves."
        ),
    ],
    status: Annotated[
        str | None,
        Field(
            description="Only leaves in this status: draft, submitted, approved, rejected "
            "or cancelled. Omit for all."
        ),
    ] = None,
) -> Annotated[CallToolResult, SearchResult]:
    context = tool_context(ctx)

    async def work() -> SearchResult:
        return found(await context.service.search(actor(), keyword, status))

    return await run(context, ToolName.SEARCH_LEAVES, work)


GET_LEAVE_BALANCE_DESCRIPTION = "Your remaining leave days (and hours) for each leave type."


async def get_leave_balance(ctx: Context) -> Annotated[CallToolResult, BalanceResult]:
    context = tool_context(ctx)
    return await run(context, ToolName.GET_LEAVE_BALANCE, lambda: context.service.balance(actor()))


CREATE_LEAVE_DESCRIPTION = (
    "Create a new leave request as a draft. It is not submitted until you call\n"
    "        update_leave_status with status=submitted."
)


async def create_leave(
    ctx: Context,
    leave_type: Annotated[
        str, Field(description="Leave type: 特休 (annual), 病假 (sick), 事假 (personal), 補休.")
    ],
    start_date: Annotated[str, Field(description="First day, YYYY-MM-DD.")],
    end_date: Annotated[str, Field(description="Last day, YYYY-MM-DD (not before start).")],
    reason: Annotated[str, Field(description="Why, in the user's words (1-200 characters).")],
) -> Annotated[CallToolResult, LeaveView]:
    context = tool_context(ctx)
    return await run(
        context,
        ToolName.CREATE_LEAVE,
        lambda: context.service.create(
            actor(), leave_type, start_date, end_date, reason, current_front_end()
        ),
    )


UPDATE_LEAVE_STATUS_DESCRIPTION = (
    "Move a leave exactly one step forward: draft → submitted by its owner; submitted →\n"
    "        approved or rejected by the owner's manager. Get the ID from search_leaves first.\n"
    "        An approved leave cannot be changed here; use cancel_approved_leave."
)


async def update_leave_status(
    ctx: Context,
    leave_id: Annotated[
        str, Field(description="The real leave ID, exactly as search_leaves returned it.")
    ],
    status: Annotated[
        str,
        Field(
            description="The next status: submitted (owner submits a draft), approved or "
            "rejected (the owner's manager decides a submitted leave)."
        ),
    ],
) -> Annotated[CallToolResult, StatusChange]:
    context = tool_context(ctx)

    async def work() -> StatusChange:
        old, view = await context.service.change_status(
            actor(), leave_id, status, current_front_end()
        )
        return StatusChange(
            leave_id=view.leave_id, from_status=old, to_status=view.status, leave=view
        )

    return await run(context, ToolName.UPDATE_LEAVE_STATUS, work)


async def ask_to_cancel(leave_id: str, ctx: Context) -> Elicit[CancelConfirmation] | _Refused:
    # Runs again on every round of the modern protocol: same question each time, and the
    # only write is on the round that asks (the one without answers), so that a question
    # nobody answers still reaches the audit log (see audit_abandoned_confirmations).
    context = tool_context(ctx)
    employee_id = actor()
    try:
        view = await context.service.check_cancellable(employee_id, leave_id)
    except Refusal as refusal:
        return _Refused(refusal)
    if not ctx.input_responses:
        await context.service.confirmation_asked(
            employee_id, view.leave_id, ToolName.CANCEL_APPROVED_LEAVE, current_front_end()
        )
    question = CONFIRM_QUESTION[context.language].format(**view.model_dump())
    return Elicit(question, CancelConfirmation)


CANCEL_APPROVED_LEAVE_DESCRIPTION = (
    "Cancel one of your approved leaves and restore its days to your balance. The user is\n"
    "        asked to confirm first; if they decline, nothing changes and you must not try"
    " another\n"
    "        tool to get the same effect."
)


async def cancel_approved_leave(
    ctx: Context,
    leave_id: Annotated[
        str, Field(description="The real ID of YOUR approved leave, from search_leaves.")
    ],
    confirmation: Annotated[ElicitationResult[CancelConfirmation], Resolve(ask_to_cancel)],
) -> Annotated[CallToolResult, CancelResult]:
    context = tool_context(ctx)
    tool = ToolName.CANCEL_APPROVED_LEAVE
    if isinstance(confirmation, AcceptedElicitation) and isinstance(confirmation.data, _Refused):
        return refused(context, tool, confirmation.data.refusal)
    accepted = (
        isinstance(confirmation, AcceptedElicitation)
        and isinstance(confirmation.data, CancelConfirmation)
        and confirmation.data.confirm
    )
    if not accepted:
        outcome = "cancelled" if isinstance(confirmation, CancelledElicitation) else "declined"
        context.metrics.elicitations.labels(outcome).inc()
        employee_id = actor()
        await context.service.record_not_applied(
            employee_id, leave_id, outcome, current_front_end()
        )
        return refused(
            context, tool, Refusal(RefusalCode(f"confirmation_{outcome}"), leave_id=leave_id)
        )
    context.metrics.elicitations.labels("accepted").inc()

    async def work() -> CancelResult:
        view = await context.service.cancel_approved(actor(), leave_id, current_front_end())
        return CancelResult(
            leave_id=view.leave_id,
            from_status=LeaveStatus.APPROVED,
            to_status=view.status,
            restored_days=view.days,
            leave=view,
        )

    return await run(context, tool, work)


READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True)
WRITE = ToolAnnotations(destructive_hint=False, idempotent_hint=False)
# (name, tool, annotations, description), in the order tools/list publishes them
TOOLS: tuple[tuple[ToolName, Callable[..., Any], ToolAnnotations, str], ...] = (
    (ToolName.SEARCH_LEAVES, search_leaves, READ_ONLY, SEARCH_LEAVES_DESCRIPTION),
    (ToolName.GET_LEAVE_BALANCE, get_leave_balance, READ_ONLY, GET_LEAVE_BALANCE_DESCRIPTION),
    (ToolName.CREATE_LEAVE, create_leave, WRITE, CREATE_LEAVE_DESCRIPTION),
    (
        ToolName.UPDATE_LEAVE_STATUS,
        update_leave_status,
        WRITE,
        UPDATE_LEAVE_STATUS_DESCRIPTION,
    ),
    (
        ToolName.CANCEL_APPROVED_LEAVE,
        cancel_approved_leave,
        ToolAnnotations(destructive_hint=True, idempotent_hint=False),
        CANCEL_APPROVED_LEAVE_DESCRIPTION,
    ),
)


def log_excerpt(text: str) -> str:
    """At most LOG_EXCERPT_CHARS of `text`, on one line."""
    flat = repr(text)[1:-1]
    if len(flat) <= LOG_EXCERPT_CHARS:
        return flat
    return f"{flat[:LOG_EXCERPT_CHARS]}… ({len(flat)} characters)"


def search_result(
    service: LeaveService, actor_id: str, keyword: str, status: str | None
) -> SearchResult:
    """What search_leaves returns, from the service on the caller's thread (the load generator
    builds realistic histories with it)."""
    return found(service.search(actor_id, keyword, status))


def found(leaves: list[LeaveView]) -> SearchResult:
    """A search's leaves as search_leaves returns them."""
    return SearchResult(count=len(leaves), leaves=leaves)
