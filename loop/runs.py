"""Runs as a service: start, stream, relay confirmations, cancel, record, keep sessions."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from mcp.types import ElicitResult
from opentelemetry.trace import Span

from common import tokens
from common.contract import TOOL_ERROR_PREFIX, StepKind
from common.credentials import hash_token
from common.runs_protocol import (
    ConfirmationOutcome,
    ConfirmationRequested,
    ConfirmationResolved,
    ConfirmMode,
    ModelFinished,
    Run,
    RunEvent,
    RunFinished,
    RunReason,
    RunReasonCode,
    RunStarted,
    RunStatus,
    RunSummary,
    ToolCallOutcome,
)
from common.sqlite import utcnow

from .auth_guard import RejectedTokens
from .engine import (
    AgentLoop,
    CallInProgress,
    Checkpoint,
    Emit,
    LoopConfig,
    Model,
    RunResult,
    RunState,
    SignInRefused,
    ToolInfo,
    ToolResult,
    ToolsUnavailable,
    current_call,
)
from .mcp_pool import (
    McpConnection,
    McpPool,
    McpUnauthorized,
    McpUnavailable,
    current_confirm_handler,
)
from .metrics import LoopMetrics
from .model import current_session
from .owners import owner_key
from .store import RunRecord, RunStore
from .tracing import run_finished, run_span
from .views import run_of_record, running_run, running_summary, summary_of_record

logger = logging.getLogger(__name__)
# A cancelled run first lets the MCP server hear "cancel" for its open questions (so the server
# audits them); a tool call that does not come back within this long is cut off regardless.
CANCEL_GRACE_SECONDS = 5.0


class UnknownConfirmation(LookupError):
    pass


class ConfirmationAlreadyAnswered(Exception):
    pass


class RunIdInUse(Exception):
    """A run with the requested id exists already (this user's or another's)."""


class RunNotRecorded(Exception):
    """The run could not be stored before it began, so nothing was run and its id is
    nobody's: the caller is told so rather than given an id that GET cannot find."""

    message = "the run store could not record the run, so it did not run; try again"


@dataclass
class PendingConfirmation:
    id: str
    message: str
    schema: dict[str, Any]
    answer: asyncio.Future[ElicitResult]
    tool_call_id: str | None = None  # the call that asked (None outside the engine's calls)
    asked_at: float = field(default_factory=time.time)  # wall clock: it outlives the process

    def view(self) -> dict[str, Any]:
        return {"confirmation_id": self.id, "message": self.message, "schema": self.schema}

    def event(self) -> ConfirmationRequested:
        return ConfirmationRequested.model_construct(
            confirmation_id=self.id, message=self.message, schema_=self.schema
        )

    def saved(self) -> dict[str, Any]:
        return {**self.view(), "tool_call_id": self.tool_call_id, "asked_at": self.asked_at}


@dataclass
class ActiveRun:
    id: str
    user_key: str
    session_id: str
    input: str
    confirm: ConfirmMode
    events: asyncio.Queue[RunEvent | None] = field(default_factory=asyncio.Queue)
    confirmations: dict[str, PendingConfirmation] = field(default_factory=dict)
    history: list[dict[str, Any]] | None = None  # given by the caller instead of the session
    remember: bool = True  # append this run to its session's history
    cancelling: bool = False  # cancelled while a confirmation was open: stop after its call
    streamed: bool = False  # its events go to the client; a run answered whole has no reader
    read_by_facade: bool = False  # a facade completion reads its events now (one at a time)
    new_session: bool = False  # a session id made for it, which nobody else can know yet
    stored: bool = False  # its record exists: GET /v1/runs/{id} can find it
    task: asyncio.Task[Run] | None = None
    # What a confirmation asked while the run goes needs to resume it after a restart: the
    # engine's state and the history the run was given.
    state: RunState | None = None
    context: list[dict[str, Any]] = field(default_factory=list)
    # A run taken over from a loop that stopped while it waited for a person: the token of
    # whoever answers (the run's own user) makes its calls, and the answers given before the
    # restart, by tool call, answer the same question when that call asks it again.
    token: str | None = None
    answered_before: dict[str, tuple[str, ElicitResult]] = field(default_factory=dict)
    suspending: bool = False  # stopped by shutdown while it waited: left to be resumed
    # Seconds spent waiting for a person to answer a confirmation: not the service's time, so
    # the run-latency SLO's histogram leaves it out.
    waited: float = 0.0
    saving: asyncio.Lock = field(default_factory=asyncio.Lock)  # one progress save at a time

    async def outcome(self) -> Run:
        """The final result; shielded, so a caller that goes away does not cancel the run.
        Raises RunNotRecorded for a run that could not even be stored."""
        if self.task is None:
            raise RuntimeError(f"run {self.id} was never started")
        final = await asyncio.shield(self.task)
        if not self.stored:
            raise RunNotRecorded(self.id)
        return final

    started: float = field(default_factory=time.perf_counter)
    created_at: dt.datetime = field(default_factory=utcnow)

    async def emit(self, event: RunEvent) -> None:
        if self.streamed:
            await self.events.put(event)


def accept_content(schema: dict[str, Any]) -> dict[str, Any]:
    """The content of an automatic "accept": true for every boolean field, defaults elsewhere."""
    content: dict[str, Any] = {}
    for name, spec in (schema.get("properties") or {}).items():
        if spec.get("type") == "boolean":
            content[name] = True
        elif "default" in spec:
            content[name] = spec["default"]
    return content


class RunTools:
    """The loop's view of the user's MCP connection, with confirmations routed to this run."""

    def __init__(self, manager: RunManager, run: ActiveRun, token: str) -> None:
        self._manager = manager
        self._run = run
        self._token = token
        self._connection: McpConnection | None = None
        self._specs: dict[str, ToolInfo] = {}

    async def _conn(self) -> McpConnection:
        if self._connection is None or not self._connection.alive:
            self._connection = await self._manager.pool.connection(self._token)
        return self._connection

    async def list(self) -> list[ToolInfo]:
        try:
            specs = await (await self._conn()).tools()
        except McpUnavailable as error:
            raise ToolsUnavailable(str(error)) from error
        except McpUnauthorized as error:
            raise self._refused(error) from error
        self._specs = {s.name: s for s in specs}
        return specs

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        metrics = self._manager.metrics
        started = time.perf_counter()
        outcome = ToolCallOutcome.ERROR
        reset = current_confirm_handler.set(self._confirm)
        try:
            try:
                try:
                    result = await (await self._conn()).call(name, arguments)
                except McpUnavailable:
                    spec = self._specs.get(name)
                    if spec is None or not spec.read_only:
                        raise  # the call may have been applied: never repeat a write blindly
                    self._connection = None  # reconnect once and repeat the read
                    result = await (await self._conn()).call(name, arguments)
            except McpUnavailable as error:
                outcome = ToolCallOutcome.UNAVAILABLE
                raise ToolsUnavailable(str(error)) from error
            except McpUnauthorized as error:
                outcome = ToolCallOutcome.SIGN_IN_REFUSED
                raise self._refused(error) from error
            outcome = ToolCallOutcome.TOOL_ERROR if result.is_error else ToolCallOutcome.OK
            return result
        finally:
            current_confirm_handler.reset(reset)
            metrics.tool_duration.labels(name, outcome).observe(time.perf_counter() - started)
            if self._run.cancelling and self._run.task is not None:
                self._run.task.cancel()  # the server has had its answer: now stop the run

    def _refused(self, error: McpUnauthorized) -> SignInRefused:
        """The token is no longer taken: the loop forgets it (its next request is a 401
        without asking the MCP server again) and the run ends saying so."""
        self._manager.forget_token(self._token)
        return SignInRefused(str(error))

    async def _confirm(self, message: str, schema: dict[str, Any]) -> ElicitResult:
        run, metrics = self._run, self._manager.metrics
        call = current_call.get()
        before = run.answered_before.pop(call.tool_call_id, None) if call else None
        asked_id = None  # set when a person is asked: the resolved event names the question
        if before is not None and before[0] == message:
            # the question the person answered before the loop restarted, asked again as the
            # call is made again: their answer (a question that changed is asked anew)
            result = before[1]
        elif run.confirm == "accept":
            result = ElicitResult(action="accept", content=accept_content(schema))
        elif run.confirm == "decline":
            result = ElicitResult(action="decline")
        else:
            pending = PendingConfirmation(
                id=f"cf_{secrets.token_hex(6)}",
                message=message,
                schema=schema,
                answer=asyncio.get_running_loop().create_future(),
                tool_call_id=call.tool_call_id if call else None,
            )
            run.confirmations[pending.id] = pending
            asked_id = pending.id
            if call is not None:
                run.state = call.state
            await self._manager.save_progress(run)  # resumable from here, should the loop stop
            await run.emit(pending.event())
            asked = time.perf_counter()
            try:
                async with self._manager.slot_given_up():
                    result = await asyncio.wait_for(
                        asyncio.shield(pending.answer), self._manager.config.confirmation_timeout
                    )
            except TimeoutError:
                result = ElicitResult(action="cancel")
                if not pending.answer.done():
                    pending.answer.set_result(result)
            finally:  # also when cancelled while waiting: the wait was still a person's
                waited = time.perf_counter() - asked
                run.waited += waited
                metrics.confirmation_wait.observe(waited)
                if call is not None:
                    _add_wait(call, waited)
            await self._manager.save_progress(run)  # answered: no longer to be resumed
        outcome = _confirmation_outcome(result)
        metrics.confirmations.labels(outcome).inc()
        await run.emit(
            ConfirmationResolved.model_construct(
                outcome=outcome, message=message, confirmation_id=asked_id
            )
        )
        return result


class RunManager:
    def __init__(
        self,
        *,
        pool: McpPool,
        model: Model,
        streaming_model: Model,
        config: LoopConfig,
        store: RunStore,
        metrics: LoopMetrics,
        max_concurrent_runs: int,
        session_max_messages: int,
        instance_id: str = "loop",
        lease_seconds: float = 30.0,
        rejected: RejectedTokens | None = None,
        peer_url: str | None = None,
    ) -> None:
        self.pool = pool
        self.rejected = rejected or RejectedTokens(30.0)  # shared with the sign-in check
        self.instance_id = instance_id  # who owns the runs this manager starts
        self.lease_seconds = lease_seconds
        self.peer_url = peer_url  # where the other loops reach this one (None: they cannot)
        self.config = config
        self.store = store
        self.metrics = metrics
        self._loop = AgentLoop(model, config)
        self._streaming_loop = AgentLoop(streaming_model, config)
        self._slots = asyncio.Semaphore(max_concurrent_runs)
        self._session_max = session_max_messages
        self.active: dict[str, ActiveRun] = {}

    @contextlib.asynccontextmanager
    async def slot_given_up(self) -> AsyncIterator[None]:
        """A run waiting for a person gives its slot to other runs while it waits (a slot
        each for open questions would leave none for anyone else) and takes one back to go
        on, queueing like a new run if all are busy."""
        self._slots.release()
        self.metrics.in_flight.dec()
        try:
            yield
        finally:
            self.metrics.in_flight.inc()
            # Shielded: cancelled while queueing, the run still leaves holding a slot, the one
            # its `async with self._slots` gives back as it ends.
            await asyncio.shield(self._slots.acquire())

    def forget_token(self, token: str) -> None:
        """A token the MCP server refused during a run: drop its connection and remember the
        refusal, as a refusal at sign-in is remembered."""
        self.pool.forget(token)
        self.rejected.add(hash_token(token))

    async def authenticate(self, token: str) -> str:
        """The user key for a token the MCP server accepts (raises McpUnauthorized)."""
        await self.pool.connection(token)
        return owner_key(token)

    async def start(
        self,
        token: str,
        user_input: str,
        *,
        session_id: str | None,
        confirm: ConfirmMode,
        stream: bool,
        history: list[dict[str, Any]] | None = None,
        run_id: str | None = None,
        events: bool = False,
    ) -> ActiveRun:
        """Start a run; with `run_id` (the client's own) raises RunIdInUse when that id is
        taken, so a retry never starts a second run. Its events are queued for a reader when it
        streams, or with `events` (the facade reads them to find a confirmation's question,
        whether or not its own answer streams); `stream` alone picks the streaming model."""
        if run_id is not None:
            stored = await self.store.run_exists(run_id)
            # No await from this check to the insertion below: two requests with one id
            # cannot both pass it.
            if stored or run_id in self.active:
                raise RunIdInUse(run_id)
        run = ActiveRun(
            id=run_id or f"run_{secrets.token_hex(8)}",
            user_key=owner_key(token),
            session_id=session_id or _new_session_id(),
            input=user_input,
            confirm=confirm,
            history=history,
            remember=history is None,
            streamed=stream or events,
            new_session=session_id is None,
        )
        self.active[run.id] = run
        run.task = asyncio.create_task(self._execute(run, token, stream))
        return run

    async def _execute(self, run: ActiveRun, token: str, stream: bool) -> Run:
        """Run, record, publish. Whatever fails, the run ends with a result and its stream ends.
        One trace: its model and tool calls are spans inside the run's."""
        with run_span(run.id) as span:
            record = RunRecord(
                id=run.id,
                user_key=run.user_key,
                session_id=run.session_id,
                status="running",
                input=run.input,
                system_prompt=self.config.prompt(),
                created_at=run.created_at,
                owner=self.instance_id,
            )
            return await self._execute_traced(run, record, token, stream, span, None)

    async def _execute_traced(
        self,
        run: ActiveRun,
        record: RunRecord,
        token: str,
        stream: bool,
        span: Span,
        saved: dict[str, Any] | None,
    ) -> Run:
        """A run from its start, or (`saved`) from where a stopped loop left it."""
        history: list[dict[str, Any]] = []
        try:
            async with self._slots:
                self.metrics.in_flight.inc()
                try:
                    if saved is None:
                        history = await self._begin(run, record)
                        run.stored = True
                    else:
                        history = run.context
                    run.context = history
                    # The router keeps a session on one replica by this key (a facade
                    # conversation's too); a run outside any session (a facade chat without
                    # a conversation id) is routed by its own id.
                    in_session = run.remember or not run.new_session
                    current_session.set(run.session_id if in_session else run.id)
                    await run.emit(RunStarted.model_construct(id=run.id, session_id=run.session_id))
                    loop = self._streaming_loop if stream else self._loop
                    tools = RunTools(self, run, token)
                    observer, checkpoint = self._observer(run), self._checkpointer(run)
                    if saved is None:
                        result = await loop.run(run.input, tools, history, observer, checkpoint)
                    else:
                        result = await loop.resume(saved, tools, history, observer, checkpoint)
                finally:
                    self.metrics.in_flight.dec()
        except asyncio.CancelledError:  # cancelled while waiting for a slot
            result = _empty_result(run, RunStatus.CANCELLED, RunReason(RunReasonCode.CANCELLED))
        except Exception as error:  # the store, most likely: fail this run, keep serving
            logger.exception("run %s failed outside the loop", run.id)
            reason = RunReason(RunReasonCode.INTERNAL, type(error).__name__)
            result = _empty_result(run, RunStatus.FAILED, reason)
        if run.suspending and result.status == RunStatus.CANCELLED:
            # Stopped by shutdown while it waited for a person: its record keeps it running,
            # with what resuming needs, for the loop that starts next (which takes it over).
            # Its stream ends without run.finished: the client follows it with GET.
            self.active.pop(run.id, None)
            if run.streamed:
                await run.events.put(None)
            raise asyncio.CancelledError
        return await self._finish(run, record, result, history, span)

    async def _finish(
        self,
        run: ActiveRun,
        record: RunRecord,
        result: RunResult,
        history: list[dict[str, Any]],
        span: Span,
    ) -> Run:
        record.finish(result, history)
        final = run_of_record(record, result.steps)
        try:
            await self._remember(run, record, result)
            run.stored = True  # written here if its start could not be
        except Exception:
            logger.exception("could not record run %s", run.id)
        self._count(run, result, final)
        run_finished(span, result, run.session_id)
        await run.emit(RunFinished.of(final))
        if run.streamed:
            await run.events.put(None)
        self.active.pop(run.id, None)
        return final

    async def _begin(self, run: ActiveRun, record: RunRecord) -> list[dict[str, Any]]:
        """Store the run as started and give its history. The session becomes the run's
        user's before anything is read or written; another user's session id gets a fresh
        session instead (ownership is settled by the store, atomically, so two users racing on
        one new id cannot both have it). A session id made for this run is nobody's, and
        nobody else can know it yet: the session is written when the run ends, with its history.
        A run given its history (a facade chat in a conversation) still claims its session:
        the conversation is its user's from then on."""
        claim = not run.new_session
        while (stored := await self.store.begin_run(record, claim_session=claim)) is None:
            run.session_id = record.session_id = _new_session_id()
        return run.history if run.history is not None else stored

    async def _remember(self, run: ActiveRun, record: RunRecord, result: RunResult) -> None:
        """Store the finished run and, for a run of a session, its messages in the session's
        history: one transaction."""
        remember = run.remember and result.status in (RunStatus.COMPLETED, RunStatus.MAX_TURNS)
        remembered = await self.store.finish_run(
            record, result.messages if remember else None, self._session_max
        )
        if not remembered:  # cannot happen after the claim; never write into another's
            logger.warning("run %s: session belongs to another user; not remembered", run.id)

    def _count(self, run: ActiveRun, result: RunResult, final: Run) -> None:
        metrics = self.metrics
        metrics.runs.labels(result.status).inc()
        wall = time.perf_counter() - run.started
        metrics.run_duration.observe(wall)
        metrics.run_working.observe(max(0.0, wall - run.waited))
        metrics.turns.observe(result.turns)
        for kind in result.detections:
            metrics.detections.labels(kind).inc()
        # the run's own view judged its claims already (views.run_of_record)
        for claim in final.claims_unverified or ():
            metrics.claims_unverified.labels(claim).inc()

    def _checkpointer(self, run: ActiveRun) -> Checkpoint:
        """Saves the run's steps as they happen (and, while a confirmation waits, what resuming
        it needs), one save at a time, each with the newest."""

        async def checkpoint(state: RunState) -> None:
            run.state = state
            await self.save_progress(run)

        return checkpoint

    async def save_progress(self, run: ActiveRun) -> None:
        """The run's steps so far and, while a confirmation waits for a person, what resuming
        the run after a restart needs (None once none waits). One save at a time."""
        if run.state is None:
            return
        async with run.saving:
            state = run.state
            try:
                await self.store.save_steps(run.id, state.snapshot(), self._resumable(run))
            except Exception as error:  # a missed checkpoint must not fail the run
                logger.warning("run %s: steps not saved: %s", run.id, type(error).__name__)

    def resumable(self, run: ActiveRun) -> bool:
        """Whether the run waits for a person in a way a restarted loop can go on with."""
        waiting = _waiting(run)
        if not waiting or run.state is None or any(p.tool_call_id is None for p in waiting):
            return False
        # Another write of the turn under way would be made again on resuming and could be
        # applied twice: not resumable until it is back.
        return run.state.writing <= {p.tool_call_id for p in waiting}

    def _resumable(self, run: ActiveRun) -> dict[str, Any] | None:
        """What resuming the run needs, while it is resumable."""
        if run.state is None or not self.resumable(run):
            return None
        waiting = _waiting(run)
        expires = min(p.asked_at for p in waiting) + self.config.confirmation_timeout
        return {
            "state": run.state.resumable(),
            "history": run.context,
            "remember": run.remember,
            "confirmations": [p.saved() for p in waiting],
            "expires_at": dt.datetime.fromtimestamp(expires, dt.UTC).isoformat(),
        }

    def _observer(self, run: ActiveRun) -> Emit:
        metrics = self.metrics
        # A call's repeated prefix: the previous call's whole prompt (a run resends its
        # conversation); the first call's, its prompt less the person's new message.
        previous = 0
        new_text = tokens.message_tokens({"role": "user", "content": run.input})

        async def observe(event: RunEvent) -> None:
            nonlocal previous
            if isinstance(event, ModelFinished) and event.step is not None:
                step = event.step
                metrics.model_duration.observe(step.duration_ms / 1000)
                metrics.tokens.labels("prompt").inc(step.prompt_tokens)
                repeated = previous or max(0, step.prompt_tokens - new_text)
                metrics.tokens.labels("prompt_repeated").inc(min(repeated, step.prompt_tokens))
                previous = step.prompt_tokens
                metrics.tokens.labels("completion").inc(step.completion_tokens)
            await run.emit(event)

        return observe

    async def events(self, run: ActiveRun) -> AsyncIterator[RunEvent]:
        while True:
            item = await run.events.get()
            if item is None:
                return
            yield item

    def answer_confirmation(
        self,
        run_id: str,
        user_key: str,
        confirmation_id: str,
        result: ElicitResult,
        token: str | None = None,
    ) -> None:
        """`token`: the answerer's, which makes the calls of a run taken over after a restart."""
        run = self.active.get(run_id)
        if run is None or run.user_key != user_key:
            raise UnknownConfirmation(run_id)
        pending = run.confirmations.get(confirmation_id)
        if pending is None:
            raise UnknownConfirmation(confirmation_id)
        if pending.answer.done():
            raise ConfirmationAlreadyAnswered(confirmation_id)
        if run.token is None:
            run.token = token
        pending.answer.set_result(result)

    def cancel(self, run_id: str, user_key: str, token: str | None = None) -> bool:
        run = self.active.get(run_id)
        if run is None or run.user_key != user_key or run.task is None:
            return False
        if run.token is None:
            run.token = token
        open_questions = _waiting(run)
        if not open_questions:
            run.task.cancel()  # the loop answers pending tool calls and records "cancelled"
            return True
        # Answer "cancel" so that the MCP server hears it (and audits the abandoned
        # confirmation), then stop the run once that call is back.
        run.cancelling = True
        for pending in open_questions:
            pending.answer.set_result(ElicitResult(action="cancel"))
        asyncio.get_running_loop().call_later(CANCEL_GRACE_SECONDS, run.task.cancel)
        return True

    async def record(self, run_id: str, user_key: str) -> Run | None:
        """The user's run: as it stands while this loop runs it, else as stored."""
        run = self.active.get(run_id)
        if run is not None and run.user_key == user_key:
            waiting = [p.view() for p in _waiting(run)]
            return running_run(run.id, run.session_id, run.input, run.created_at, waiting)
        stored = await self.store.get_run(run_id, user_key)
        return None if stored is None else run_of_record(stored)

    async def recent(self, user_key: str, limit: int) -> list[RunSummary]:
        """The user's newest runs, running ones included, newest first."""
        stored = await self.store.recent_runs(user_key, limit)
        known = {r.id for r in stored}
        waiting = [  # not stored until they get a slot
            running_summary(r.id, r.session_id, r.input, r.created_at)
            for r in self.active.values()
            if r.user_key == user_key and r.id not in known
        ]
        listed = [summary_of_record(r) for r in stored]
        return sorted(waiting + listed, key=lambda r: r.created_at or "", reverse=True)[:limit]

    async def mark_interrupted(self) -> int:
        """At start: the runs this loop left running before it restarted (and those whose
        owner's lease ran out) never finish; say so in their records. Another live loop's
        runs on the same store are left alone. Takes this loop's lease first. A run that was
        waiting for a person's confirmation is taken over instead (see adopt): it goes on
        once they answer. Returns how many were marked."""
        await self.store.renew_lease(self.instance_id, self.peer_url)
        marked, waiting = await self.store.take_over(self.instance_id, self.lease_seconds)
        for record in waiting:
            self.adopt(record)
        return marked

    def adopt(self, record: RunRecord) -> ActiveRun:
        """A run a stopped loop left waiting for a confirmation, as this loop's: its questions
        are open again (GET shows them, POST answers them); once every one is answered it goes
        on from where it stopped, with the answerer's token; unanswered by the time the
        question expires, it ends cancelled."""
        saved = record.suspended or {}
        run = ActiveRun(
            id=record.id,
            user_key=record.user_key,
            session_id=record.session_id,
            input=record.input,
            confirm="ask",
            remember=saved["remember"],
            stored=True,
            context=list(saved["history"]),
            created_at=record.created_at,
        )
        loop = asyncio.get_running_loop()
        for question in saved["confirmations"]:
            pending = PendingConfirmation(
                id=question["confirmation_id"],
                message=question["message"],
                schema=question["schema"],
                answer=loop.create_future(),
                tool_call_id=question["tool_call_id"],
                asked_at=question["asked_at"],
            )
            run.confirmations[pending.id] = pending
        self.active[run.id] = run
        run.task = asyncio.create_task(self._resume(run, record, saved))
        logger.info("run %s: taken over, waiting for its confirmation", run.id)
        return run

    async def _resume(self, run: ActiveRun, record: RunRecord, saved: dict[str, Any]) -> Run:
        with run_span(run.id) as span:
            waiting = list(run.confirmations.values())
            expires = dt.datetime.fromisoformat(saved["expires_at"])
            left = (expires - utcnow()).total_seconds()
            try:
                answers = asyncio.gather(*(asyncio.shield(p.answer) for p in waiting))
                await asyncio.wait_for(answers, max(left, 0.0))
            except TimeoutError:
                state = RunState.restore(saved["state"])
                result = state.expire_confirmation(self.config.confirmation_timeout)
                return await self._finish(run, record, result, run.context, span)
            except asyncio.CancelledError:  # shutdown: the next loop takes it over again
                self.active.pop(run.id, None)
                raise
            if run.token is None:  # answered without a token to act with (not over HTTP)
                state = RunState.restore(saved["state"])
                state.answer_pending_calls(f"{TOOL_ERROR_PREFIX} 已取消")
                reason = RunReason(RunReasonCode.CANCELLED)
                result = state.result(RunStatus.CANCELLED, "", reason=reason)
                return await self._finish(run, record, result, run.context, span)
            run.answered_before = {
                p.tool_call_id: (p.message, p.answer.result())
                for p in waiting
                if p.tool_call_id is not None
            }
            record.owner = self.instance_id
            return await self._execute_traced(run, record, run.token, False, span, saved["state"])

    async def keep_lease(self) -> None:
        """Forever: renew this loop's lease, and mark the runs of loops that stopped renewing
        theirs (a loop that died and did not come back). A third of a lease apart, so one
        missed renewal never lets the lease run out."""
        every = self.lease_seconds / 3
        while True:
            await asyncio.sleep(every)
            try:
                await self.store.renew_lease(self.instance_id, self.peer_url)
                swept, waiting = await self.store.take_over(
                    self.instance_id, self.lease_seconds, own=False
                )
            except Exception as error:  # the store may be briefly away: try next time
                logger.warning("lease renewal failed: %s", type(error).__name__)
                continue
            for record in waiting:
                self.adopt(record)
            if swept:
                logger.warning("marked %d run(s) of a loop that stopped as interrupted", swept)

    async def holder_url(self, run_id: str, user_key: str) -> str | None:
        """Where to send a request about the user's run when another live loop holds it and
        can be reached (None: this loop answers it as best it can; it holds the run itself,
        or nobody does)."""
        if run_id in self.active:
            return None
        return await self.store.holder_url(run_id, user_key, self.instance_id, self.lease_seconds)

    async def release_lease(self) -> None:
        """At a clean stop: this loop's runs have ended, nobody need wait for its lease."""
        try:
            await self.store.release_lease(self.instance_id)
        except Exception as error:
            logger.warning("lease release failed: %s", type(error).__name__)


def _waiting(run: ActiveRun) -> list[PendingConfirmation]:
    """The run's confirmations not answered yet."""
    return [p for p in run.confirmations.values() if not p.answer.done()]


def _new_session_id() -> str:
    return f"ses_{secrets.token_hex(8)}"


def _add_wait(call: CallInProgress, seconds: float) -> None:
    """Note on the tool call's step how much of its duration a person took to answer."""
    for step in reversed(call.state.steps):
        if step.type == StepKind.TOOL and step.tool_call_id == call.tool_call_id:
            step.confirmation_wait_ms = round(step.confirmation_wait_ms + seconds * 1000, 3)
            return


def _confirmation_outcome(result: ElicitResult) -> ConfirmationOutcome:
    if result.action == "accept" and result.content and result.content.get("confirm") is False:
        return ConfirmationOutcome.DECLINED  # "accepted" with the confirm box left unticked
    if result.action == "accept":
        return ConfirmationOutcome.ACCEPTED
    if result.action == "decline":
        return ConfirmationOutcome.DECLINED
    return ConfirmationOutcome.CANCELLED


def _empty_result(run: ActiveRun, status: RunStatus, reason: RunReason) -> RunResult:
    return RunResult(status, "", [], [{"role": "user", "content": run.input}], [], 0, reason=reason)
