"""A run waiting for a person's confirmation outlives the loop that asked: the loop that
starts next (or another live one, once the asker's lease lapses) takes it over, shows the
question, and goes on once it is answered; unanswered in time it ends cancelled."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

from mcp.types import ElicitResult
from sqlalchemy import update

from common.credentials import hash_token
from common.runs_protocol import ConfirmationRequested, ToolFinished
from common.sqlite import utcnow
from loop.engine import CONFIRMATION_EXPIRED_ANSWER, LoopConfig, ToolInfo, ToolResult
from loop.mcp_pool import current_confirm_handler
from loop.metrics import LoopMetrics
from loop.runs import ActiveRun, RunManager
from loop.store import LoopInstance, RunStore
from tests.fakes import ScriptedModel, call, calls, text

TOKEN = "token-e001"
SCHEMA = {"type": "object", "properties": {"confirm": {"type": "boolean"}}}


class Leaves:
    """The MCP server's side: one approved leave whose cancellation is confirmed first; the
    question names the leave's status, as the real server's does."""

    def __init__(self) -> None:
        self.status = {"LV-1": "approved"}
        self.answers: list[str] = []  # each answer the server heard

    def connection(self) -> Connection:
        return Connection(self)


class Connection:
    alive = True

    def __init__(self, leaves: Leaves) -> None:
        self.leaves = leaves

    async def tools(self) -> list[ToolInfo]:
        return [
            ToolInfo("search_leaves", "search", {"type": "object"}, read_only=True),
            ToolInfo("cancel_approved_leave", "cancel", {"type": "object"}, True),
        ]

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        if name == "search_leaves":
            return ToolResult("LV-1", False, {"leaves": list(self.leaves.status)})
        leave = arguments["leave_id"]
        ask = current_confirm_handler.get()
        assert ask is not None
        answer = await ask(f"確定要取消 {leave}（目前 {self.leaves.status[leave]}）嗎？", SCHEMA)
        self.leaves.answers.append(answer.action)
        if answer.action == "accept" and (answer.content or {}).get("confirm", True):
            self.leaves.status[leave] = "cancelled"
            return ToolResult(f"已取消 {leave}", False, {"leave_id": leave, "status": "cancelled"})
        return ToolResult(f"沒有取消 {leave}（{answer.action}）", True)


class Pool:
    def __init__(self, leaves: Leaves) -> None:
        self.leaves = leaves

    async def connection(self, token: str) -> Connection:
        return self.leaves.connection()

    def forget(self, token: str) -> None:
        pass


def loop_manager(
    store: RunStore, leaves: Leaves, model: Any, name: str, timeout: float = 120.0
) -> RunManager:
    return RunManager(
        pool=Pool(leaves),  # type: ignore[arg-type]
        model=model,
        streaming_model=model,
        config=LoopConfig(confirmation_timeout=timeout),
        store=store,
        metrics=LoopMetrics(),
        max_concurrent_runs=4,
        session_max_messages=50,
        instance_id=name,
    )


def cancelling_model(*after: Any) -> ScriptedModel:
    return ScriptedModel(
        calls(call("cancel_approved_leave", {"leave_id": "LV-1"}, "c-cancel")), *after
    )


async def asked(runs: RunManager, run: ActiveRun) -> None:
    """Until the run (a streamed one) asks for a confirmation: by then it is saved."""
    async for event in runs.events(run):
        if isinstance(event, ConfirmationRequested):
            return
    raise AssertionError("the run ended without asking")


async def waiting_run(
    store: RunStore, leaves: Leaves, session_id: str | None = None, question_seconds: float = 120.0
) -> tuple[RunManager, ActiveRun]:
    """loop-a, started, with a run that asks to confirm cancelling LV-1 and waits."""
    first = loop_manager(store, leaves, cancelling_model(), "loop-a", question_seconds)
    await first.mark_interrupted()
    run = await first.start(TOKEN, "取消 LV-1", session_id=session_id, confirm="ask", stream=True)
    await asked(first, run)
    return first, run


async def stop_while_waiting(first: RunManager, run: ActiveRun) -> None:
    """What the loop's shutdown does (loop/app.py): a waiting run is left to be resumed."""
    run.suspending = first.resumable(run)
    assert run.suspending
    assert run.task is not None
    run.task.cancel()
    await asyncio.gather(run.task, return_exceptions=True)
    await first.release_lease()


async def test_a_waiting_run_is_taken_over_after_a_restart_and_goes_on_when_answered(
    tmp_path, new_database_url
):
    store = RunStore(new_database_url(tmp_path, "loop"))
    leaves = Leaves()
    first, run = await waiting_run(store, leaves, session_id="s1")
    await stop_while_waiting(first, run)
    assert store.sync.get_run(run.id, run.user_key).status == "running"

    resumed_model = ScriptedModel(text("已取消 LV-1。"))
    second = loop_manager(store, leaves, resumed_model, "loop-b")
    assert await second.mark_interrupted() == 0  # taken over, not marked
    shown = await second.record(run.id, run.user_key)
    assert shown is not None and shown.status == "running"
    (question,) = shown.confirmations or []
    assert question.message == "確定要取消 LV-1（目前 approved）嗎？"
    assert await second.record(run.id, hash_token("someone else")) is None

    second.answer_confirmation(
        run.id,
        run.user_key,
        question.confirmation_id,
        ElicitResult(action="accept", content={"confirm": True}),
        token=TOKEN,
    )
    final = await asyncio.wait_for(second.active[run.id].outcome(), 10)
    assert final.status == "completed" and final.answer == "已取消 LV-1。"
    assert leaves.status["LV-1"] == "cancelled" and leaves.answers == ["accept"]
    # the model went on from the same transcript: its call, then the call's result
    (prompt,) = resumed_model.seen
    assert [m["role"] for m in prompt[1:]] == ["user", "assistant", "tool"]
    assert prompt[-1] == {"role": "tool", "tool_call_id": "c-cancel", "content": "已取消 LV-1"}
    tool_steps = [s for s in final.steps or [] if s.type == "tool"]
    assert [(s.name, s.error) for s in tool_steps] == [("cancel_approved_leave", None)]
    record = store.sync.get_run(run.id, run.user_key)
    assert record.status == "completed" and record.suspended is None
    assert record.owner == "loop-b"
    history = store.sync.history("s1", run.user_key)
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
    store.dispose()


async def test_a_question_that_changed_meanwhile_is_asked_anew(tmp_path, new_database_url):
    store = RunStore(new_database_url(tmp_path, "loop"))
    leaves = Leaves()
    first, run = await waiting_run(store, leaves)
    await stop_while_waiting(first, run)
    leaves.status["LV-1"] = "approved (modified)"  # the leave changed while nobody looked

    second = loop_manager(store, leaves, ScriptedModel(text("好的，沒有取消。")), "loop-b")
    await second.mark_interrupted()
    adopted = second.active[run.id]
    adopted.streamed = True  # follow its events, as a client of a stream would
    (old,) = adopted.confirmations.values()
    accept = ElicitResult(action="accept", content={"confirm": True})
    second.answer_confirmation(run.id, run.user_key, old.id, accept, token=TOKEN)
    await asked(second, adopted)  # the re-made call asks its new question
    assert leaves.answers == []  # the old answer was not given to the new question
    new = next(p for p in adopted.confirmations.values() if p.id != old.id)
    assert "modified" in new.message
    shown = await second.record(run.id, run.user_key)
    assert [c.confirmation_id for c in shown.confirmations or []] == [new.id]
    second.answer_confirmation(run.id, run.user_key, new.id, ElicitResult(action="decline"))
    final = await asyncio.wait_for(adopted.outcome(), 10)
    assert final.status == "completed" and leaves.answers == ["decline"]
    assert leaves.status["LV-1"] == "approved (modified)"
    store.dispose()


async def test_a_taken_over_question_nobody_answers_ends_the_run_cancelled(
    tmp_path, new_database_url
):
    store = RunStore(new_database_url(tmp_path, "loop"))
    leaves = Leaves()
    first, run = await waiting_run(store, leaves, question_seconds=1.0)
    await stop_while_waiting(first, run)

    model = ScriptedModel()
    second = loop_manager(store, leaves, model, "loop-b", timeout=1.0)
    await second.mark_interrupted()
    final = await asyncio.wait_for(second.active[run.id].outcome(), 10)
    assert final.status == "cancelled" and final.answer == CONFIRMATION_EXPIRED_ANSWER
    assert str(final.reason) == "cancelled: the confirmation was not answered within 1 s"
    (step,) = [s for s in final.steps or [] if s.type == "tool"]
    assert (step.name, step.error) == ("cancel_approved_leave", "cancelled")
    assert leaves.answers == [] and model.seen == []  # nothing was called, nothing decided
    record = store.sync.get_run(run.id, run.user_key)
    assert record.status == "cancelled" and record.suspended is None
    assert [m["role"] for m in record.messages] == ["user", "assistant", "tool"]  # valid
    store.dispose()


async def test_cancelling_a_taken_over_run_tells_the_server_and_ends_it(tmp_path, new_database_url):
    store = RunStore(new_database_url(tmp_path, "loop"))
    leaves = Leaves()
    first, run = await waiting_run(store, leaves)
    await stop_while_waiting(first, run)

    second = loop_manager(store, leaves, ScriptedModel(), "loop-b")
    await second.mark_interrupted()
    adopted = second.active[run.id]
    assert second.cancel(run.id, run.user_key, TOKEN)
    final = await asyncio.wait_for(adopted.outcome(), 10)
    assert final.status == "cancelled"
    assert leaves.answers == ["cancel"] and leaves.status["LV-1"] == "approved"
    store.dispose()


async def test_another_live_loop_takes_over_a_waiting_run_once_its_owner_s_lease_lapses(
    tmp_path, new_database_url
):
    store = RunStore(new_database_url(tmp_path, "loop"))
    leaves = Leaves()
    _, run = await waiting_run(store, leaves)
    # loop-a dies: nothing more is recorded, its lease is renewed no more
    assert run.task is not None
    run.suspending = True
    run.task.cancel()
    await asyncio.gather(run.task, return_exceptions=True)
    store.sync.renew_lease("loop-b")
    assert store.sync.take_over("loop-b", 30, own=False) == (0, [])  # loop-a's lease still holds
    lapsed = utcnow() - dt.timedelta(seconds=60)
    with store.engine.begin() as connection:
        connection.execute(
            update(LoopInstance).where(LoopInstance.id == "loop-a").values(renewed_at=lapsed)
        )
    marked, taken = store.sync.take_over("loop-b", 30, own=False)
    assert marked == 0 and [r.id for r in taken] == [run.id]
    assert store.sync.get_run(run.id, run.user_key).owner == "loop-b"
    store.dispose()


async def test_a_run_is_not_left_to_resume_while_another_write_of_its_turn_is_under_way(
    tmp_path, new_database_url
):
    """Resuming makes the turn's unfinished calls again: a write under way beside the question
    could be applied twice, so the run is resumable only once that write is back."""
    store = RunStore(new_database_url(tmp_path, "loop"))
    leaves = Leaves()
    release = asyncio.Event()
    applied: list[str] = []

    class TwoCallConnection(Connection):
        async def tools(self) -> list[ToolInfo]:
            return [*await super().tools(), ToolInfo("update_leave_status", "update", {})]

        async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
            if name == "update_leave_status":
                await release.wait()
                applied.append(arguments["leave_id"])
                return ToolResult("submitted", False)
            return await super().call(name, arguments)

    class TwoCallPool(Pool):
        async def connection(self, token: str) -> Connection:
            return TwoCallConnection(self.leaves)

    model = ScriptedModel(
        calls(
            call("cancel_approved_leave", {"leave_id": "LV-1"}, "c-cancel"),
            call("update_leave_status", {"leave_id": "LV-2", "status": "submitted"}, "c-submit"),
        )
    )
    runs = loop_manager(store, leaves, model, "loop-a")
    runs.pool = TwoCallPool(leaves)  # type: ignore[assignment]
    run = await runs.start(
        TOKEN, "取消 LV-1、送出 LV-2", session_id=None, confirm="ask", stream=True
    )
    await asked(runs, run)
    assert not runs.resumable(run)  # the submit is still under way
    assert store.sync.get_run(run.id, run.user_key).suspended is None
    release.set()
    async for event in runs.events(run):  # the submit comes back: now it may be resumed
        if isinstance(event, ToolFinished) and event.name == "update_leave_status":
            break
    assert runs.resumable(run) and applied == ["LV-2"]
    saved = store.sync.get_run(run.id, run.user_key).suspended
    assert saved is not None and set(saved["state"]["answered"]) == {"c-submit"}
    assert run.task is not None
    run.task.cancel()
    await asyncio.gather(run.task, return_exceptions=True)
    store.dispose()
