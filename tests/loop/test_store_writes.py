"""The run writes on SQLite: made on the event loop without waiting, handed to the writer thread
when another connection is writing, the WAL checkpointed off the loop; and stored exactly as
SQLAlchemy would have stored them."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time

from common.sqlite import NonWaitingWriter
from loop.store import RunRecord, RunStore
from tests.loop.helpers import manager

WRITES = 300


def file_size(path: str) -> int:
    return os.path.getsize(path)


def record(run_id: str, **values: object) -> RunRecord:
    return RunRecord(
        id=run_id, user_key="k", session_id=f"s-{run_id}", status="running", input="hi", **values
    )


async def test_a_run_waits_off_the_loop_while_another_process_holds_the_write_lock(
    tmp_path, monkeypatch
):
    path = tmp_path / "loop.db"
    store = RunStore(f"sqlite:///{path}")
    loop_thread = threading.current_thread()
    begun_off_the_loop = threading.Event()
    begin_run = store.sync.begin_run

    def recorded_begin_run(*args: object, **kwargs: object) -> object:
        if threading.current_thread() is not loop_thread:
            begun_off_the_loop.set()
        return begin_run(*args, **kwargs)

    monkeypatch.setattr(store.sync, "begin_run", recorded_begin_run)
    runs = manager(store)
    other_process = sqlite3.connect(path, isolation_level=None)
    other_process.execute("BEGIN IMMEDIATE")  # holds SQLite's write lock
    try:
        started = time.monotonic()
        run = await runs.start("token", "查一下", session_id=None, confirm="decline", stream=False)
        # the first write, refused at once on the loop, now waits on the writer thread; the
        # loop hears of that through a thread of its own, so it is turning meanwhile
        assert await asyncio.to_thread(begun_off_the_loop.wait, 10)
        # a write waiting on the loop itself would have held it for the busy timeout, 30 s
        assert time.monotonic() - started < 5
        assert not run.task.done()
        assert store.sync.get_run(run.id, run.user_key) is None
    finally:
        other_process.commit()
    final = await asyncio.wait_for(run.outcome(), 30)
    assert final.status == "completed"
    stored = store.sync.get_run(run.id, run.user_key)
    assert stored is not None and stored.status == "completed"
    assert store.sync.history(run.session_id, run.user_key)[-1]["content"] == "好的。"
    store.finish_writes()
    store.dispose()


async def test_the_wal_is_checkpointed_on_the_writer_thread(tmp_path, monkeypatch):
    path = tmp_path / "loop.db"
    wal = f"{path}-wal"
    monkeypatch.setattr(NonWaitingWriter, "CHECKPOINT_EVERY", 10)
    store = RunStore(f"sqlite:///{path}")
    checkpointed_on: list[str] = []
    checkpoint = store.checkpoint

    def recorded_checkpoint() -> None:
        checkpointed_on.append(threading.current_thread().name)
        checkpoint()

    monkeypatch.setattr(store, "checkpoint", recorded_checkpoint)
    sizes = []
    for i in range(WRITES):
        await store.begin_run(record(f"r{i}"), claim_session=True)
        sizes.append(file_size(wal))
    store.finish_writes()  # waits for the checkpoints handed to the writer thread
    one_write = sizes[1] - sizes[0]
    print(
        f"WAL: {one_write} B a write; {sizes[-1]} B after {WRITES} writes, "
        f"{len(checkpointed_on)} checkpoints"
    )
    assert checkpointed_on and all(name.startswith("run-store") for name in checkpointed_on)
    # Without checkpoints it grows by one write's frames each write, and nearly as much with
    # passive ones, which a steady stream of writes starves; restarted after each checkpoint
    # it keeps to about one checkpoint interval's worth.
    assert sizes[-1] < 2.5 * NonWaitingWriter.CHECKPOINT_EVERY * one_write
    assert len(store.sync.recent_runs("k", WRITES + 1)) == WRITES
    store.dispose()


async def test_writes_during_a_checkpoint_wait_for_it_then_are_made_on_the_loop(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(NonWaitingWriter, "CHECKPOINT_EVERY", 1)
    store = RunStore(f"sqlite:///{tmp_path / 'loop.db'}")
    checkpoint, begin_run = store.checkpoint, store.sync.begin_run
    under_way, release = threading.Event(), threading.Event()
    loop_thread = threading.current_thread()
    written_on_the_loop: list[bool] = []

    def held_checkpoint() -> None:
        under_way.set()
        release.wait(10)
        checkpoint()

    def recorded_begin_run(*args: object, **kwargs: object) -> object:
        written_on_the_loop.append(threading.current_thread() is loop_thread)
        return begin_run(*args, **kwargs)

    monkeypatch.setattr(store, "checkpoint", held_checkpoint)
    monkeypatch.setattr(store.sync, "begin_run", recorded_begin_run)
    await store.begin_run(record("r0"), claim_session=True)
    assert await asyncio.to_thread(under_way.wait, 10)  # the checkpoint after it is under way
    all_started = asyncio.Event()
    started = 0

    async def write(run_id: str) -> None:
        nonlocal started
        started += 1
        if started == 5:
            all_started.set()  # this task goes on to its first wait before the test resumes
        await store.begin_run(record(run_id), claim_session=True)

    writes = [asyncio.create_task(write(f"r{i}")) for i in range(1, 6)]
    await all_started.wait()  # every write has been asked for
    held_back = len(written_on_the_loop)
    release.set()
    await asyncio.wait_for(asyncio.gather(*writes), 10)
    store.finish_writes()
    assert held_back == 1  # none was made while the checkpoint was under way
    # then each was made on the loop, none handed to the writer thread to queue behind it
    assert written_on_the_loop == [True] * 6
    assert len(store.sync.recent_runs("k", 10)) == 6
    store.dispose()


def test_values_left_unset_stay_sql_null_and_keep_what_the_start_stored(tmp_path):
    path = tmp_path / "loop.db"
    store = RunStore(f"sqlite:///{path}")
    started = record("r1", system_prompt="be brief")
    store.sync.begin_run(started, claim_session=False, wait=False)
    finished = record("r1", answer="done", steps=[{"name": "search_leaves"}])
    finished.status = "completed"
    store.sync.finish_run(finished, None, 10, wait=False)
    store.dispose()
    with sqlite3.connect(path) as database:
        row = database.execute(
            "SELECT result IS NULL, reason IS NULL, system_prompt, steps, answer FROM runs"
        ).fetchone()
    # None is no JSON 'null' in a column (SQLAlchemy leaves such a value out of its write)
    assert row == (1, 1, "be brief", '[{"name": "search_leaves"}]', "done")
