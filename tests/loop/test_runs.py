"""The run service around the loop, with fakes: whatever breaks, a run ends and says why."""

from __future__ import annotations

import asyncio
import datetime as dt

import sqlalchemy
from sqlalchemy import create_engine, update
from sqlalchemy.engine import make_url

from common.sqlite import utcnow
from loop.engine import LoopConfig
from loop.metrics import LoopMetrics
from loop.runs import RunManager
from loop.store import LoopInstance, RunRecord, RunStore
from tests.fakes import AnsweringModel, FakePool, LeavePool, ScriptedModel, call, calls
from tests.loop.helpers import append, claim, manager


async def test_a_store_failure_still_ends_the_run_and_its_stream(
    tmp_path, new_database_url, monkeypatch
):
    store = RunStore(new_database_url(tmp_path, "loop"))

    def broken(*_args, **_kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(store.sync, "begin_run", broken)
    runs = manager(store)
    run = await runs.start("token", "查一下", session_id=None, confirm="decline", stream=True)
    events = [event.event async for event in runs.events(run)]
    final = await asyncio.wait_for(run.task, 5)
    assert events[-1] == "run.finished"
    assert final.status == "failed" and str(final.reason) == "internal: OSError"
    assert runs.active == {}


async def test_runs_left_running_by_a_dead_process_are_marked_interrupted(
    tmp_path, new_database_url
):
    store = RunStore(new_database_url(tmp_path, "loop"))
    store.sync.begin_run(
        RunRecord(id="run_x", user_key="k", session_id="s", status="running", input="hi"),
        claim_session=False,
    )
    assert await manager(store).mark_interrupted() == 1
    record = store.sync.get_run("run_x", "k")
    assert record.status == "failed" and "stopped during the run" in record.reason


async def test_run_times_read_back_in_utc_with_their_offset_on_any_store(
    tmp_path, new_database_url
):
    url = new_database_url(tmp_path, "loop")
    if make_url(url).get_backend_name() == "postgresql":
        # PostgreSQL answers in its session's time zone: make it one that is not UTC
        admin = sqlalchemy.create_engine(url, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            database = make_url(url).database
            connection.execute(
                sqlalchemy.text(f"ALTER DATABASE \"{database}\" SET timezone TO 'Asia/Taipei'")
            )
        admin.dispose()
    store = RunStore(url)
    runs = manager(store)
    before = dt.datetime.now(dt.UTC)
    run = await runs.start("token", "查一下", session_id=None, confirm="decline", stream=False)
    final = await asyncio.wait_for(run.task, 10)
    after = dt.datetime.now(dt.UTC)
    record = await runs.record(final.id, run.user_key)
    [listed] = await runs.recent(run.user_key, 5)
    stamps = [record.created_at, record.finished_at, listed.created_at, final.finished_at]
    stamps += [listed.finished_at, *(step.started_at for step in record.steps)]
    for stamp in stamps:  # one form: RFC 3339 in UTC, as the steps' times are written
        assert stamp.endswith("+00:00"), stamps
        assert before <= dt.datetime.fromisoformat(stamp) <= after, (stamps, before, after)
    stored = store.sync.get_run(final.id, run.user_key)
    assert stored.created_at.utcoffset() == dt.timedelta(0) and before <= stored.created_at
    store.dispose()


async def test_concurrent_runs_record_and_remember_without_locking_errors(
    tmp_path, new_database_url
):
    store = RunStore(new_database_url(tmp_path, "loop"))
    runs = manager(store)
    started = [
        await runs.start(
            "token", f"查一下 {i}", session_id="shared", confirm="decline", stream=False
        )
        for i in range(30)
    ]
    finals = await asyncio.gather(*(r.task for r in started))
    assert {f.status for f in finals} == {"completed"}
    assert len(store.sync.history("shared", started[0].user_key)) == 10  # bounded


async def test_two_users_racing_on_one_new_session_id_never_share_it(tmp_path, new_database_url):
    from common.credentials import hash_token

    store = RunStore(new_database_url(tmp_path, "loop"))
    runs = manager(store)
    # Both runs start before either is stored: ownership must be settled by the store.
    first = await runs.start(
        "token-a", "甲的請求", session_id="new", confirm="decline", stream=False
    )
    second = await runs.start(
        "token-b", "乙的請求", session_id="new", confirm="decline", stream=False
    )
    finals = await asyncio.gather(first.task, second.task)
    assert finals[0].session_id != finals[1].session_id
    for final, token, text in zip(
        finals, ("token-a", "token-b"), ("甲的請求", "乙的請求"), strict=True
    ):
        own = store.sync.history(final.session_id, hash_token(token))
        assert [m["content"] for m in own if m["role"] == "user"] == [text]


def test_a_session_is_never_written_by_another_user(tmp_path, new_database_url):
    store = RunStore(new_database_url(tmp_path, "loop"))
    assert claim(store, "s", "alice") and claim(store, "s", "alice")
    assert not claim(store, "s", "bob")
    assert not append(store, "s", "bob", [{"role": "user", "content": "bob"}])
    assert store.sync.history("s", "alice") == [] and store.sync.session_owner("s") == "alice"


async def test_an_applied_write_is_in_the_record_before_the_run_goes_on(tmp_path):
    """A service that dies after a write was applied keeps that write, with its result."""
    store = RunStore(f"sqlite:///{tmp_path / 'loop.db'}")
    model = ScriptedModel(  # searches, submits, then never answers: the service dies meanwhile
        calls(call("search_leaves", {"keyword": "家庭旅遊"}, "c1")),
        calls(call("update_leave_status", {"leave_id": "LV-1", "status": "submitted"}, "c2")),
        then_hang=True,
    )
    runs = manager(store, model, LeavePool())
    run = await runs.start("token", "送出", session_id=None, confirm="decline", stream=False)
    await asyncio.wait_for(model.spent.wait(), 5)
    # what a crash now would leave: a fresh store on the same database, as after a restart
    restarted = RunStore(f"sqlite:///{tmp_path / 'loop.db'}")
    assert await manager(restarted).mark_interrupted() == 1
    record = restarted.sync.get_run(run.id, run.user_key)
    tool_steps = [(s["name"], s["error"], s["result"]) for s in record.steps if s["type"] == "tool"]
    assert tool_steps == [
        ("search_leaves", None, {"count": 1}),
        ("update_leave_status", None, {"to_status": "submitted"}),
    ]
    assert record.status == "failed" and "outcome is unknown" not in record.reason
    run.task.cancel()
    await asyncio.gather(run.task, return_exceptions=True)
    restarted.dispose()
    store.dispose()


async def test_a_finished_run_is_stored_whole_with_its_session_in_one_go(tmp_path):
    store = RunStore(f"sqlite:///{tmp_path / 'loop.db'}")
    runs = manager(store)
    run = await runs.start("token", "查一下", session_id="s1", confirm="decline", stream=False)
    final = await run.task
    record = store.sync.get_run(run.id, run.user_key)
    assert record.status == "completed" and record.finished_at is not None
    assert record.answer == final.answer == "好的。"
    assert (
        record.steps == [s.to_dict() for s in final.steps]
        and record.turns == 1
        and record.prompt_tokens == 5
    )
    assert record.messages == [
        {"role": "user", "content": "查一下"},
        {"role": "assistant", "content": "好的。"},
    ]
    assert store.sync.history("s1", run.user_key) == record.messages


def test_a_run_in_another_users_session_is_stored_without_touching_that_session(tmp_path):
    store = RunStore(f"sqlite:///{tmp_path / 'loop.db'}")
    assert claim(store, "theirs", "alice")
    mine = RunRecord(id="r1", user_key="bob", session_id="theirs", status="running", input="hi")
    assert store.sync.begin_run(mine, claim_session=True) is None
    assert store.sync.get_run("r1", "bob") is None  # nothing written
    mine.session_id = "mine"
    assert store.sync.begin_run(mine, claim_session=True) == []
    mine.status, mine.session_id = "completed", "theirs"
    assert not store.sync.finish_run(mine, [{"role": "user", "content": "hi"}], 10)
    assert store.sync.get_run("r1", "bob").status == "completed"
    assert store.sync.history("theirs", "alice") == []


def test_a_run_whose_start_was_never_stored_is_stored_when_it_finishes(tmp_path):
    store = RunStore(f"sqlite:///{tmp_path / 'loop.db'}")
    record = RunRecord(id="r2", user_key="k", session_id="s", status="failed", input="hi")
    assert store.sync.finish_run(record, None, 10)
    assert store.sync.get_run("r2", "k").status == "failed"


def test_a_late_step_save_does_not_overwrite_a_finished_run(tmp_path):
    store = RunStore(f"sqlite:///{tmp_path / 'loop.db'}")
    record = RunRecord(id="r3", user_key="k", session_id="s", status="running", input="hi")
    store.sync.begin_run(record, claim_session=False)
    store.sync.save_steps("r3", [{"name": "early"}])
    assert store.sync.get_run("r3", "k").steps == [{"name": "early"}]
    record.status, record.steps = "completed", [{"name": "early"}, {"name": "last"}]
    store.sync.finish_run(record, None, 10)
    store.sync.save_steps("r3", [{"name": "late"}])
    assert store.sync.get_run("r3", "k").steps == [{"name": "early"}, {"name": "last"}]


def _running(store: RunStore, run_id: str, owner: str | None) -> None:
    store.sync.begin_run(
        RunRecord(id=run_id, user_key="k", session_id="s", status="running", input="hi",
                  owner=owner),
        claim_session=False,
    )  # fmt: skip


def _lease_lapsed(store: RunStore, instance_id: str) -> None:
    """The instance last renewed its lease an hour ago, as a loop that died would have."""
    with store.engine.begin() as connection:
        connection.execute(
            update(LoopInstance)
            .where(LoopInstance.id == instance_id)
            .values(renewed_at=utcnow() - dt.timedelta(hours=1))
        )


async def test_a_loop_starting_marks_its_own_orphans_and_leaves_another_live_loops_runs(
    tmp_path, new_database_url
):
    """Two loops on one store: each has an identity and a lease."""
    store = RunStore(new_database_url(tmp_path, "loop"))
    store.sync.renew_lease("loop-a")
    _running(store, "run_a", "loop-a")  # loop-a is alive, its run waits on a person
    _running(store, "run_b", "loop-b")  # loop-b's, from before loop-b restarted
    _running(store, "run_old", None)  # an older loop's, which named no owner
    assert store.sync.mark_interrupted("loop-b", 30) == 2  # loop-b starts again
    statuses = {r: store.sync.get_run(r, "k").status for r in ("run_a", "run_b", "run_old")}
    assert statuses == {"run_a": "running", "run_b": "failed", "run_old": "failed"}
    # loop-a dies and does not come back: loop-b's sweep takes its runs once the lease lapses
    assert store.sync.mark_interrupted("loop-b", 30, own=False) == 0
    _lease_lapsed(store, "loop-a")
    assert store.sync.mark_interrupted("loop-b", 30, own=False) == 1
    record = store.sync.get_run("run_a", "k")
    assert record.status == "failed" and "stopped during the run" in record.reason


async def test_a_run_is_owned_by_the_loop_that_starts_it(tmp_path, new_database_url):
    store = RunStore(new_database_url(tmp_path, "loop"))
    runs = RunManager(
        pool=FakePool(), model=AnsweringModel(), streaming_model=AnsweringModel(),
        config=LoopConfig(), store=store, metrics=LoopMetrics(), max_concurrent_runs=4,
        session_max_messages=10, instance_id="loop-7",
    )  # fmt: skip
    run = await runs.start("token", "hi", session_id=None, confirm="decline", stream=False)
    await run.outcome()
    assert store.sync.get_run(run.id, run.user_key).owner == "loop-7"


def test_a_store_an_older_loop_made_gains_the_new_columns(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    with engine.begin() as connection:  # the runs table as it was before runs had an owner
        connection.execute(sqlalchemy.text("CREATE TABLE runs (id VARCHAR(40) PRIMARY KEY, user_key "
                                "VARCHAR(64), session_id VARCHAR(64), status VARCHAR(16), "
                                "input TEXT, answer TEXT, reason VARCHAR(500), result JSON, "
                                "steps JSON, messages JSON, tools JSON, system_prompt TEXT, "
                                "history JSON, prompt_tokens INTEGER, completion_tokens INTEGER, "
                                "turns INTEGER, tool_errors INTEGER, created_at DATETIME, "
                                "finished_at DATETIME)"))  # fmt: skip
        connection.execute(sqlalchemy.text("INSERT INTO runs (id, user_key, session_id, status, input) "
                                "VALUES ('run_1', 'k', 's', 'running', 'hi')"))  # fmt: skip
    engine.dispose()
    store = RunStore(url)
    assert store.sync.get_run("run_1", "k").owner is None  # kept, and readable
    assert store.sync.mark_interrupted("loop-a") == 1
    RunStore(url).dispose()  # a second start adds nothing twice
    store.dispose()
