"""The agent loop itself: tools → model → tool calls → results → repeat. No HTTP in here.

The five steps of the seed loop, plus the invariants that keep a transcript valid for any
OpenAI-compatible server: the assistant message is appended as returned (null content → ""),
and every tool_call_id gets exactly one tool message — also when a call failed, timed out, was
cancelled or was declined.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from common.contract import SYSTEM_PROMPT, TOOL_ERROR_PREFIX, StepKind, StepOutcome
from common.runs_protocol import (
    AnswerDelta,
    Detection,
    DetectionKind,
    ModelFinished,
    ModelStarted,
    RunEvent,
    RunReason,
    RunStatus,
    Step,
    ToolFinished,
    ToolStarted,
)
from common.runs_protocol import RunReasonCode as Why
from common.tokens import tools_tokens

from . import toolcall_text, tracing, verify
from .context import (
    CONTEXT_OVERFLOW_ANSWER,
    ContextOverflow,
    ContextWindow,
    cap_tool_result,
    estimate,
)

MAX_TURNS_ANSWER = "已達最大輪次上限，未能完成任務。"
UNAVAILABLE_ANSWER = "差勤系統暫時無法連線，這次的請求沒有完成，請稍後再試。"
SIGN_IN_REFUSED_ANSWER = (
    "你的登入已失效（可能已過期、被撤銷，或帳號已停用），差勤系統拒絕了這次的操作。"
    "請重新登入後再試一次。"
)
UNKNOWN_OUTCOME_ANSWER = (
    "{tool} 逾時，無法確認這個變更是否已經生效（剛查詢時{seen}；變更仍可能稍後才生效）。"
    "請稍後再查詢這張假單確認目前的狀態，確認之前請不要重做。"
)
UNAVAILABLE_WRITE_ANSWER = (
    "差勤系統在處理 {tools} 時中斷連線，無法確認這個變更是否已經生效。"
    "請稍後用「查一下我的假單」確認假單目前的狀態，再決定是否重做。"
)
STOPPED_TOOL_TEXT = "已記錄最終結果。"
CONFIRMATION_EXPIRED_TEXT = "已取消：確認逾時，這個操作沒有執行。"
CONFIRMATION_EXPIRED_ANSWER = "確認逾時，操作沒有執行。如果仍要進行，請重新提出。"

# -- what the loop talks to ----------------------------------------------------------------


@dataclass
class ModelReply:
    message: dict[str, Any]  # role, content, tool_calls (OpenAI shapes)
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    response_id: str = ""  # the server's id of the completion (vLLM's request id)
    response_model: str = ""


class ModelError(Exception):
    """The model endpoint could not give an answer (after retries)."""


class ModelContextExceeded(ModelError):
    """The model refused the prompt as longer than its context (the estimate fell short)."""


class ToolsUnavailable(Exception):
    """The tool server could not be reached, or the connection broke during a call (so a write
    may or may not have been applied)."""


class SignInRefused(Exception):
    """The tool server no longer takes the person's sign-in (the token revoked or expired, the
    person deactivated): nothing can be done for them until they sign in again."""


class Model(Protocol):
    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        on_text: Callable[[str], Awaitable[None]] | None = None,
    ) -> ModelReply: ...

    # Optional: `async def context_window(self) -> int | None`, the model's context length.


@dataclass(frozen=True)
class ToolInfo:
    name: str
    description: str
    parameters: dict[str, Any]
    needs_confirmation: bool = False
    read_only: bool = False

    def openai_tool(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass(frozen=True)
class ToolResult:
    text: str
    is_error: bool
    structured: dict[str, Any] | None = None


class Tools(Protocol):
    async def list(self) -> Sequence[ToolInfo]: ...
    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult: ...


Emit = Callable[[RunEvent], Awaitable[None]]
# Called as each tool call that may change something (every tool not marked read-only) starts
# and ends, with a function that returns every step so far (dicts; unfinished ones say
# in_progress), so that a run cut short by a crash still shows every write it had set going
# and every result it had applied. Reads change nothing: they are saved with the next write's
# checkpoint or the finished run. (A function, so the caller takes the snapshot when it is its
# turn to save.)
Checkpoint = Callable[["RunState"], Awaitable[None]]


async def _no_emit(_event: RunEvent) -> None:
    return None


async def _no_checkpoint(_state: RunState) -> None:
    return None


@dataclass(frozen=True)
class CallInProgress:
    """The tool call being made, seen from inside it (a confirmation asked during the call
    saves the run so that it can be resumed after a restart)."""

    state: RunState
    tool_call_id: str


current_call: ContextVar[CallInProgress | None] = ContextVar("current_call", default=None)


# -- what the loop produces ----------------------------------------------------------------


@dataclass
class RunResult:
    status: RunStatus
    answer: str
    steps: list[Step]
    messages: list[dict[str, Any]]  # this run's transcript: user, assistant, tool messages
    tools: list[dict[str, Any]]
    turns: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    result: Any = None
    reason: RunReason | None = None
    detections: list[str] = field(default_factory=list)

    @property
    def tool_errors(self) -> int:
        return sum(1 for s in self.steps if s.type == StepKind.TOOL and s.failed)


WEEKDAYS = "一二三四五六日"  # Monday first, as date.weekday() counts


@dataclass
class LoopConfig:
    system_prompt: str = SYSTEM_PROMPT
    max_turns: int = 8
    stop_tools: frozenset[str] = frozenset()
    tool_timeout: float = 30.0
    confirmation_timeout: float = 120.0
    tool_concurrency: int = 4
    context_tokens: int | None = None  # None: ask the model (context_window), else no limit
    answer_reserve_tokens: int = 512  # kept free in the context for the model's answer
    tool_result_max_tokens: int = 1024  # a longer tool result is cut to this
    # Today's date for the prompt (None: the prompt alone): a model cannot turn 下週一 into a
    # date the server takes without knowing what day it is.
    today: Callable[[], dt.date] | None = None

    def prompt(self) -> str:
        """The system prompt a run starts with: the trained sentences, and the date."""
        if self.today is None:
            return self.system_prompt
        day = self.today()
        return f"{self.system_prompt}\n今天是 {day.isoformat()}（星期{WEEKDAYS[day.weekday()]}）。"


# -- the loop ------------------------------------------------------------------------------


class AgentLoop:
    def __init__(self, model: Model, config: LoopConfig | None = None) -> None:
        self.model = model
        self.config = config or LoopConfig()
        self._window: ContextWindow | None = None

    async def _context_window(self) -> ContextWindow | None:
        if self._window is None:
            size = self.config.context_tokens
            if size is None and hasattr(self.model, "context_window"):
                size = await self.model.context_window()
            if size:
                self._window = ContextWindow(size, self.config.answer_reserve_tokens)
        return self._window

    async def run(
        self,
        user_input: str,
        tools: Tools,
        history: Sequence[dict[str, Any]] = (),
        emit: Emit = _no_emit,
        checkpoint: Checkpoint = _no_checkpoint,
    ) -> RunResult:
        state = RunState(user_input, checkpoint)
        return await self._drive(state, tools, history, emit, resuming=False)

    async def resume(
        self,
        saved: dict[str, Any],
        tools: Tools,
        history: Sequence[dict[str, Any]] = (),
        emit: Emit = _no_emit,
        checkpoint: Checkpoint = _no_checkpoint,
    ) -> RunResult:
        """Go on with a run saved by RunState.resumable() while a confirmation was open: the
        tool calls of its last turn that had not finished are made again (the one that asked
        asks again and its caller answers with what the person said), then the turns go on."""
        state = RunState.restore(saved, checkpoint)
        return await self._drive(state, tools, history, emit, resuming=True)

    async def _drive(
        self,
        state: RunState,
        tools: Tools,
        history: Sequence[dict[str, Any]],
        emit: Emit,
        resuming: bool,
    ) -> RunResult:
        config = self.config
        try:
            try:
                catalogue = {t.name: t for t in await tools.list()}
            except ToolsUnavailable as error:
                # a resumed run's open calls are answered (a new run has none yet)
                state.answer_pending_calls(f"{TOOL_ERROR_PREFIX} 差勤系統暫時無法連線")
                return state.result(
                    RunStatus.FAILED, UNAVAILABLE_ANSWER, reason=_unavailable(error)
                )
            except SignInRefused as error:
                state.answer_pending_calls(f"{TOOL_ERROR_PREFIX} 使用者的登入已失效")
                return _refused_sign_in(state, error)
            if not resuming:  # a resumed run keeps the tools it was offered
                state.tools = [t.openai_tool() for t in catalogue.values()]
            system = {"role": "system", "content": config.prompt()}
            window = await self._context_window()
            # the same definitions every turn: their JSON counted once, not twice a turn
            tools_cost = tools_tokens(state.tools) if window is not None else 0
            if resuming:
                await self._run_tool_calls(state.open_calls(), catalogue, tools, state, emit)
                ended = self._after_tool_calls(catalogue, state)
                if ended is not None:
                    return ended
            for turn in range(state.turns + 1, config.max_turns + 1):
                state.turns = turn
                if window is None:
                    prompt = [system, *history, *state.messages]
                else:
                    prompt = window.fit(system, history, state.messages, tools_cost)
                reply = await self._call_model(prompt, state, emit)
                if window is not None:
                    window.observe(estimate(prompt, tools_cost), reply.prompt_tokens)
                message = _as_appended(reply.message)
                state.messages.append(message)
                calls = message.get("tool_calls") or []
                if not calls:
                    return await self._finish_text(message, reply, catalogue, state, emit)
                stop_call = next(
                    (c for c in calls if c["function"]["name"] in config.stop_tools), None
                )
                if stop_call is not None:
                    return self._finish_with_stop_tool(stop_call, calls, state)
                await self._run_tool_calls(calls, catalogue, tools, state, emit)
                ended = self._after_tool_calls(catalogue, state)
                if ended is not None:
                    return ended
            return state.result(
                RunStatus.MAX_TURNS, MAX_TURNS_ANSWER, reason=RunReason(Why.MAX_TURNS)
            )
        except (ContextOverflow, ModelContextExceeded) as error:
            reason = RunReason(Why.CONTEXT_OVERFLOW, str(error))
            return state.result(RunStatus.FAILED, CONTEXT_OVERFLOW_ANSWER, reason=reason)
        except ModelError as error:
            return state.result(RunStatus.FAILED, "", reason=RunReason(Why.MODEL_ERROR, str(error)))
        except asyncio.CancelledError:
            state.answer_pending_calls(f"{TOOL_ERROR_PREFIX} 已取消")
            return state.result(RunStatus.CANCELLED, "", reason=RunReason(Why.CANCELLED))
        except Exception as error:  # an MCP server that is down when the run starts
            state.answer_pending_calls(f"{TOOL_ERROR_PREFIX} {type(error).__name__}")
            reason = RunReason(Why.EXCEPTION, f"{type(error).__name__}: {error}")
            return state.result(RunStatus.FAILED, "", reason=reason)

    def _after_tool_calls(
        self, catalogue: dict[str, ToolInfo], state: RunState
    ) -> RunResult | None:
        """How the run ends after a turn's tool calls, if it cannot go on."""
        if state.sign_in_refused is not None:  # no call can succeed: end and say why
            return _refused_sign_in(state, state.sign_in_refused)
        if state.unreachable:  # the model would only guess: end and say so
            return self._finish_unreachable(catalogue, state)
        if state.unknown:  # a write may or may not apply: say so, never "not done"
            return self._finish_unknown(state)
        return None

    async def _call_model(
        self, messages: list[dict[str, Any]], state: RunState, emit: Emit
    ) -> ModelReply:
        step = state.step(StepKind.MODEL, "chat")
        await emit(ModelStarted.model_construct(turn=state.turns))

        async def on_text(delta: str) -> None:
            await emit(AnswerDelta.model_construct(text=delta))

        try:
            reply = await self.model.complete(messages, state.tools, on_text)
        except ModelError as error:
            state.close(step, StepOutcome.MODEL_ERROR, str(error))
            await emit(ModelFinished.model_construct(turn=state.turns, error=str(error)))
            raise
        step.prompt_tokens, step.completion_tokens = reply.prompt_tokens, reply.completion_tokens
        state.prompt_tokens += reply.prompt_tokens
        state.completion_tokens += reply.completion_tokens
        step.result = {
            "finish_reason": reply.finish_reason,
            "tool_calls": [c["function"]["name"] for c in reply.message.get("tool_calls") or []],
        }
        state.close(step)
        await emit(ModelFinished.model_construct(turn=state.turns, step=copy.copy(step)))
        return reply

    @staticmethod
    def _finish_unreachable(catalogue: dict[str, ToolInfo], state: RunState) -> RunResult:
        writes = [u.tool for u in state.unreachable if not catalogue[u.tool].read_only]
        answer = (
            UNAVAILABLE_WRITE_ANSWER.format(tools="、".join(dict.fromkeys(writes)))
            if writes
            else UNAVAILABLE_ANSWER
        )
        return state.result(
            RunStatus.FAILED, answer, reason=_unavailable(state.unreachable[0].error)
        )

    @staticmethod
    def _finish_unknown(state: RunState) -> RunResult:
        unknown = state.unknown[0]
        leave = unknown.arguments.get("leave_id")
        tool = f"{unknown.tool}（{leave}）" if leave else unknown.tool
        seen = unknown.verified.seen
        answer = UNKNOWN_OUTCOME_ANSWER.format(tool=tool, seen=seen)
        reason = RunReason(
            Why.OUTCOME_UNKNOWN, f"{tool} timed out after {unknown.timeout:g} s; then {seen}"
        )
        return state.result(RunStatus.FAILED, answer, reason=reason)

    async def _finish_text(
        self,
        message: dict[str, Any],
        reply: ModelReply,
        catalogue: dict[str, ToolInfo],
        state: RunState,
        emit: Emit,
    ) -> RunResult:
        text = message.get("content") or ""
        # before the length check: a call cut off by max_tokens is still a call written as text
        if looks_like_tool_call(text, catalogue):
            await self._detect(
                state,
                emit,
                DetectionKind.TOOL_CALL_IN_CONTENT,
                "the model wrote a tool call as text: start vLLM with --enable-auto-tool-choice "
                "and the --tool-call-parser of the base model",
            )
            return state.result(RunStatus.FAILED, text, reason=RunReason(Why.TOOL_CALL_IN_CONTENT))
        if reply.finish_reason == "length":
            await self._detect(
                state, emit, DetectionKind.LENGTH, "the model hit max_tokens; answer cut off"
            )
            return state.result(RunStatus.FAILED, text, reason=RunReason(Why.LENGTH))
        return state.result(RunStatus.COMPLETED, text)

    async def _detect(self, state: RunState, emit: Emit, kind: DetectionKind, detail: str) -> None:
        step = state.step(StepKind.DETECTION, kind)
        state.close(step, StepOutcome.DETECTED, detail)
        state.detections.append(kind)
        await emit(Detection.model_construct(kind=kind, detail=detail))

    def _finish_with_stop_tool(
        self, stop_call: dict[str, Any], calls: list[dict[str, Any]], state: RunState
    ) -> RunResult:
        arguments, error = parse_arguments(stop_call["function"].get("arguments"))
        step = state.step(StepKind.TOOL, stop_call["function"]["name"])
        step.tool_call_id, step.arguments = stop_call["id"], arguments
        if error:
            state.close(step, StepOutcome.INVALID_ARGUMENTS, error)
        else:
            state.close(step)
        for call in calls:  # keep the transcript valid for the session's next run
            state.messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": STOPPED_TOOL_TEXT}
            )
        if error:
            reason = RunReason(Why.STOP_TOOL_ARGUMENTS, error)
            return state.result(RunStatus.FAILED, "", reason=reason)
        return state.result(RunStatus.COMPLETED, "", result=arguments)

    async def _run_tool_calls(
        self,
        calls: list[dict[str, Any]],
        catalogue: dict[str, ToolInfo],
        tools: Tools,
        state: RunState,
        emit: Emit,
    ) -> None:
        """Make the calls (at most tool_concurrency at once), then give each of the turn's calls
        its tool message in the order the model made them (a resumed run's calls that had
        finished before its restart keep the answer they had)."""
        limit = asyncio.Semaphore(max(self.config.tool_concurrency, 1))

        async def one(call: dict[str, Any]) -> None:
            async with limit:
                with tracing.tool_span(call["function"]["name"], call["id"]):
                    await self._run_one(call, catalogue, tools, state, emit)

        await asyncio.gather(*(one(c) for c in calls))
        for call in state.turn_calls():
            state.messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": state.answered[call["id"]]}
            )
        state.answered = {}

    async def _run_one(
        self,
        call: dict[str, Any],
        catalogue: dict[str, ToolInfo],
        tools: Tools,
        state: RunState,
        emit: Emit,
    ) -> None:
        """Make one call; its tool message's text goes in state.answered."""
        name = call["function"]["name"]
        may_change = False  # a call that is not made (bad arguments, unknown tool) changes nothing
        step = state.step(StepKind.TOOL, name)
        step.tool_call_id = call["id"]
        arguments, parse_error = parse_arguments(call["function"].get("arguments"))
        step.arguments = arguments if parse_error is None else call["function"].get("arguments")
        await emit(
            ToolStarted.model_construct(
                tool_call_id=call["id"], name=name, arguments=step.arguments
            )
        )
        if parse_error is not None:
            text = (
                f"{TOOL_ERROR_PREFIX} 參數不是有效的 JSON（{parse_error}），"
                f"請修正後重新呼叫 {name}。"
            )
            step.end(StepOutcome.INVALID_ARGUMENTS, parse_error)
        elif name not in catalogue:
            available = "、".join(catalogue)
            text = f"{TOOL_ERROR_PREFIX} 沒有名為 {name} 的工具。可用的工具：{available}。"
            step.end(StepOutcome.UNKNOWN_TOOL)
        else:
            info = catalogue[name]
            timeout = self.config.tool_timeout + (
                self.config.confirmation_timeout if info.needs_confirmation else 0
            )
            may_change = not info.read_only
            if may_change:
                state.writing.add(call["id"])
                await state.checkpoint()
            current_call.set(CallInProgress(state, call["id"]))  # this call's task only
            try:
                result = await asyncio.wait_for(tools.call(name, arguments), timeout)
            except TimeoutError:
                if info.read_only:
                    text = f"{TOOL_ERROR_PREFIX} 工具 {name} 逾時（{timeout:g} 秒），請稍後再試。"
                    step.end(StepOutcome.TIMEOUT)
                else:  # it may still be applied: find out, never call it "not done"
                    state.close(step, StepOutcome.TIMEOUT_OUTCOME_UNKNOWN)
                    verified = await self._verify(name, arguments, catalogue, tools, state)
                    if verified.applied:
                        step.end(StepOutcome.TIMEOUT_APPLIED)
                        text = f"工具 {name} 逾時，但查詢確認變更已經生效：{verified.seen}。"
                    else:
                        state.unknown.append(UnknownOutcome(name, arguments, timeout, verified))
                        text = (
                            f"{TOOL_ERROR_PREFIX} 工具 {name} 逾時（{timeout:g} 秒），"
                            f"無法確認變更是否已經生效：剛查詢時{verified.seen}，"
                            "但變更仍可能稍後才生效。請勿重做。"
                        )
            except asyncio.CancelledError:
                state.close(step, StepOutcome.CANCELLED)
                raise
            except SignInRefused as error:
                text = f"{TOOL_ERROR_PREFIX} 差勤系統拒絕了使用者的登入，工具 {name} 沒有執行。"
                step.end(StepOutcome.SIGN_IN_REFUSED, str(error))
                state.sign_in_refused = error
            except ToolsUnavailable as error:
                text = f"{TOOL_ERROR_PREFIX} 差勤系統暫時無法連線，工具 {name} 沒有回應。"
                step.end(StepOutcome.UNAVAILABLE, str(error))
                state.unreachable.append(Unreachable(name, error))
            except Exception as error:  # a tool failure is the model's to read, not a crash
                text = f"{TOOL_ERROR_PREFIX} 工具 {name} 暫時無法使用（{type(error).__name__}）。"
                step.end(StepOutcome.EXCEPTION, f"{type(error).__name__}: {error}")
            else:
                step.result = result.structured if result.structured is not None else result.text
                text = (
                    f"{TOOL_ERROR_PREFIX} {result.text}"
                    if result.is_error
                    else cap_tool_result(
                        result.text, result.structured, self.config.tool_result_max_tokens
                    )
                )
                if result.is_error:
                    step.end(StepOutcome.TOOL_ERROR)
        state.close(step)
        tracing.tool_finished(step.error if step.failed else None)
        state.answered[call["id"]] = text  # before the save: a resumed run never repeats it
        if may_change:
            state.writing.discard(call["id"])
            await state.checkpoint()
        # a copy, as the event is read after the emit returns (a shallow one, as ever: arguments
        # and results are never changed once set)
        finished = copy.copy(step)
        await emit(ToolFinished.model_construct(tool_call_id=call["id"], name=name, step=finished))

    async def _verify(
        self,
        name: str,
        arguments: dict[str, Any],
        catalogue: dict[str, ToolInfo],
        tools: Tools,
        state: RunState,
    ) -> verify.Verified:
        """Read back what a timed-out write was to change (recorded as a `verify` step)."""
        check = verify.check_call(name, arguments)
        if check is None or check[0] not in catalogue:
            return verify.Verified(False, "沒有辦法查詢它的結果")
        step = state.step(StepKind.VERIFY, check[0])
        step.arguments = check[1]
        try:
            with tracing.tool_span(check[0], None, verify=True):
                found = await asyncio.wait_for(tools.call(*check), self.config.tool_timeout)
        except asyncio.CancelledError:
            state.close(step, StepOutcome.CANCELLED)
            raise
        except Exception as error:  # a timeout too: the state cannot be read now
            state.close(step, StepOutcome.EXCEPTION, f"{type(error).__name__}: {error}")
            return verify.Verified(False, "查詢目前狀態也沒有成功")
        step.result = found.structured if found.structured is not None else found.text
        verified = verify.judge(name, arguments, found.structured)
        state.close(step, None if verified.applied else StepOutcome.NOT_APPLIED_YET)
        return verified


@dataclass(frozen=True)
class Unreachable:
    """A tool call the tool server could not be reached for."""

    tool: str
    error: ToolsUnavailable


@dataclass(frozen=True)
class UnknownOutcome:
    """A write that timed out and that a read-back did not show: it may still be applied."""

    tool: str
    arguments: dict[str, Any]
    timeout: float
    verified: verify.Verified


class RunState:
    """A run as it goes: its transcript, steps and counts; what a checkpoint saves."""

    def __init__(self, user_input: str, checkpoint: Checkpoint = _no_checkpoint) -> None:
        self._checkpoint = checkpoint
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": user_input}]
        # this turn's tool calls that have finished: their tool message's text
        self.answered: dict[str, str] = {}
        self.writing: set[str] = set()  # the calls under way that may change something
        self.steps: list[Step] = []
        self.tools: list[dict[str, Any]] = []
        self.turns = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.detections: list[str] = []
        self.unreachable: list[Unreachable] = []
        self.sign_in_refused: SignInRefused | None = None
        self.unknown: list[UnknownOutcome] = []
        self._open: dict[Step, float] = {}  # steps started, not closed: their perf_counter start

    def step(self, kind: StepKind, name: str) -> Step:
        step = Step(kind, name, started_at=dt.datetime.now(dt.UTC).isoformat())
        self._open[step] = time.perf_counter()
        self.steps.append(step)
        return step

    def close(
        self, step: Step, outcome: StepOutcome | None = None, detail: str | None = None
    ) -> None:
        started = self._open.pop(step, None)
        if started is not None:
            step.duration_ms = round((time.perf_counter() - started) * 1000, 3)
        if outcome is not None:
            step.end(outcome, detail)

    async def checkpoint(self) -> None:
        await self._checkpoint(self)

    def resumable(self) -> dict[str, Any]:
        """What resume() needs to go on with the run (JSON): taken while a tool call of the
        last turn waits for a person's answer."""
        return {
            "messages": self.messages,
            "steps": self.snapshot(),
            "tools": self.tools,
            "turns": self.turns,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "detections": self.detections,
            "answered": self.answered,
        }

    @classmethod
    def restore(cls, saved: dict[str, Any], checkpoint: Checkpoint = _no_checkpoint) -> RunState:
        """The state resumable() saved. The steps of the calls that had not finished are left
        out: each is made again, with a step of its own."""
        state = cls("", checkpoint)
        state.messages = list(saved["messages"])
        state.tools = list(saved["tools"])
        state.turns = saved["turns"]
        state.prompt_tokens = saved["prompt_tokens"]
        state.completion_tokens = saved["completion_tokens"]
        state.detections = list(saved["detections"])
        state.answered = dict(saved["answered"])
        unfinished = {call["id"] for call in state.open_calls()}
        state.steps = [
            Step.from_dict(step)
            for step in saved["steps"]
            if not (step.get("tool_call_id") in unfinished and step.get("error") == "in_progress")
        ]
        return state

    def turn_calls(self) -> list[dict[str, Any]]:
        """The tool calls of the last assistant message (the turn under way)."""
        last = self.messages[-1] if self.messages else {}
        return list(last.get("tool_calls") or []) if last.get("role") == "assistant" else []

    def open_calls(self) -> list[dict[str, Any]]:
        """The turn's tool calls that have not finished."""
        return [call for call in self.turn_calls() if call["id"] not in self.answered]

    def snapshot(self) -> list[dict[str, Any]]:
        steps = [s.to_dict() for s in self.steps]
        for record, step in zip(steps, self.steps, strict=True):
            if step in self._open:
                record["error"] = StepOutcome.IN_PROGRESS
        return steps

    def answer_pending_calls(self, text: str) -> None:
        """Every tool_call_id gets its tool message, even when the run stops mid-turn: those
        that finished their own, the rest `text`."""
        answered = {m.get("tool_call_id") for m in self.messages if m.get("role") == "tool"}
        for call in self.turn_calls():
            if call["id"] not in answered:
                content = self.answered.get(call["id"], text)
                self.messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": content}
                )
        self.answered = {}

    def expire_confirmation(self, timeout: float) -> RunResult:
        """A restored run whose confirmation nobody answered in time: its open calls were not
        made, and the run ends cancelled."""
        detail = f"the confirmation was not answered within {timeout:g} s"
        for call in self.open_calls():
            step = self.step(StepKind.TOOL, call["function"]["name"])
            step.tool_call_id = call["id"]
            step.arguments, _ = parse_arguments(call["function"].get("arguments"))
            self.close(step, StepOutcome.CANCELLED, detail)
        self.answer_pending_calls(f"{TOOL_ERROR_PREFIX} {CONFIRMATION_EXPIRED_TEXT}")
        return self.result(
            RunStatus.CANCELLED,
            CONFIRMATION_EXPIRED_ANSWER,
            reason=RunReason(Why.CANCELLED, detail),
        )

    def result(
        self,
        status: RunStatus,
        answer: str,
        *,
        reason: RunReason | None = None,
        result: Any = None,
    ) -> RunResult:
        return RunResult(
            status=status,
            answer=answer,
            steps=self.steps,
            messages=self.messages,
            tools=self.tools,
            turns=self.turns,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            result=result,
            reason=reason,
            detections=self.detections,
        )


def _unavailable(error: ToolsUnavailable) -> RunReason:
    return RunReason(Why.TOOLS_UNAVAILABLE, str(error))


def _refused_sign_in(state: RunState, error: SignInRefused) -> RunResult:
    return state.result(
        RunStatus.FAILED, SIGN_IN_REFUSED_ANSWER, reason=RunReason(Why.SIGN_IN_REFUSED, str(error))
    )


def _as_appended(message: dict[str, Any]) -> dict[str, Any]:
    """The assistant message as returned, with `content: null` made "" (some servers reject
    null) and without empty or None fields."""
    appended: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    if message.get("tool_calls"):
        appended["tool_calls"] = [
            {
                "id": c["id"],
                "type": c.get("type") or "function",
                "function": {
                    "name": c["function"]["name"],
                    "arguments": c["function"].get("arguments") or "",
                },
            }
            for c in message["tool_calls"]
        ]
    return appended


def parse_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """Arguments as a dict, or the reason they are not one. Never raises."""
    if raw is None or raw == "":
        return {}, None
    if isinstance(raw, dict):
        return raw, None
    try:
        value = json.loads(raw)
    except (TypeError, ValueError) as error:
        return {}, str(error)
    if not isinstance(value, dict):
        return {}, "arguments must be a JSON object"
    return value, None


def looks_like_tool_call(text: str, catalogue: dict[str, ToolInfo]) -> bool:
    """True when text content carries a tool call (vLLM without the right tool parser)."""
    return toolcall_text.looks_like_tool_call(text, catalogue.keys())
