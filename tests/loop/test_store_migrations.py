"""The run store's schema: made and upgraded by its migrations, from every schema a shipped loop
made (tests/schemas.py), on SQLite and, with --database-url, PostgreSQL; loops starting
together on an empty store all start, and one of them migrates."""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter

import pytest
from sqlalchemy import create_engine

from common.migrations import compare, current_revision
from loop.migrations import MIGRATIONS
from loop.store import Base, RunRecord, RunStore
from tests.schemas import shipped
from tests.support import run_to_exit

CREATED = dt.datetime(2026, 1, 5, 9, 30, tzinfo=dt.UTC)
REVISIONS = ["l0001", "l0002", "l0003", "l0004"]
# Rows as an older loop wrote them; each schema takes the columns it had.
ROWS = {
    "runs": [
        {
            "id": "run-finished",
            "user_key": "user-a",
            "session_id": "session-a",
            "status": "completed",
            "input": "查一下我的特休",
            "answer": "你還有 7 天特休",
            "reason": None,
            "result": {"days": 7},
            "steps": [{"type": "tool", "name": "get_leave_balance", "error": None}],
            "messages": [{"role": "user", "content": "查一下我的特休"}],
            "tools": [{"type": "function", "function": {"name": "get_leave_balance"}}],
            "system_prompt": "你是請假助理",
            "history": [],
            "prompt_tokens": 120,
            "completion_tokens": 30,
            "turns": 2,
            "tool_errors": 0,
            "created_at": CREATED,
            "finished_at": CREATED + dt.timedelta(seconds=3),
            "owner": "loop-old:8080",
        },
        {
            "id": "run-running",
            "user_key": "user-a",
            "session_id": "session-a",
            "status": "running",
            "input": "送出",
            "answer": "",
            "steps": [],
            "messages": [],
            "tools": [],
            "system_prompt": "",
            "history": [],
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "turns": 0,
            "tool_errors": 0,
            "created_at": CREATED + dt.timedelta(minutes=1),
        },
    ],
    "sessions": [
        {
            "id": "session-a",
            "user_key": "user-a",
            "messages": [{"role": "user", "content": "查一下我的特休"}],
            "updated_at": CREATED,
        }
    ],
    "loop_instances": [{"id": "loop-old:8080", "renewed_at": CREATED}],
}


@pytest.mark.parametrize("schema", shipped("loop"), ids=lambda schema: schema.name)
def test_a_store_every_shipped_loop_made_is_upgraded_with_its_rows(
    tmp_path, new_database_url, schema
):
    url = new_database_url(tmp_path, "loop")
    engine = create_engine(url)
    schema.create(engine, ROWS)
    assert current_revision(engine, MIGRATIONS) is None  # made before migrations

    store = RunStore(url)
    try:
        # each revision ran; those the schema already had added nothing
        assert store.migrated == REVISIONS
        assert current_revision(engine, MIGRATIONS) == MIGRATIONS.head == REVISIONS[-1]
        with engine.connect() as connection:
            assert compare(connection, MIGRATIONS, Base.metadata) == []

        finished = store.sync.get_run("run-finished", "user-a")
        assert finished is not None
        assert (finished.status, finished.answer, finished.result) == (
            "completed",
            "你還有 7 天特休",
            {"days": 7},
        )
        assert finished.created_at == CREATED and finished.suspended is None
        assert finished.owner == ("loop-old:8080" if schema.has_column("runs", "owner") else None)
        assert store.sync.history("session-a", "user-a") == ROWS["sessions"][0]["messages"]
        # an ownerless running run (an older loop's) is this loop's to mark at its start
        assert store.sync.mark_interrupted("loop-new:8080") == 1
        assert store.sync.get_run("run-running", "user-a").status == "failed"
        # and the upgraded store takes new runs, with the newest columns
        record = RunRecord(
            id="run-new", user_key="user-a", session_id="session-a", status="running", input="再查"
        )
        assert store.sync.begin_run(record, claim_session=True) == ROWS["sessions"][0]["messages"]
        store.sync.save_steps("run-new", [], {"confirmations": [1], "expires_at": "2099-01-01"})
        assert store.sync.get_run("run-new", "user-a").suspended["confirmations"] == [1]
    finally:
        store.dispose()
        engine.dispose()


def test_a_store_at_the_newest_revision_applies_nothing(tmp_path, new_database_url):
    url = new_database_url(tmp_path, "loop")
    first = RunStore(url)
    first.dispose()
    again = RunStore(url)
    try:
        assert first.migrated == REVISIONS
        assert again.migrated == []
    finally:
        again.dispose()


def test_loops_starting_together_on_an_empty_store_all_start_and_one_migrates(
    tmp_path, new_database_url
):
    """Before migrations the loop created its tables with no lock on PostgreSQL: loops started
    together on an empty PostgreSQL database failed, 7 of 8 (IntegrityError: the tables' row
    types created twice)."""
    url = new_database_url(tmp_path, "fresh")
    replicas = 8
    start = threading.Barrier(replicas)
    lock = threading.Lock()
    outcomes: Counter[str] = Counter()
    stores: list[RunStore] = []

    def open_store() -> None:
        start.wait()
        try:
            store = RunStore(url)
        except Exception as error:
            outcome = type(error).__name__
        else:
            outcome = "started"
            with lock:
                stores.append(store)
        with lock:
            outcomes[outcome] += 1

    threads = [threading.Thread(target=open_store) for _ in range(replicas)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        print(f"{replicas} loops starting at once: {dict(outcomes)}")
        assert outcomes == Counter({"started": replicas})
        assert sorted(len(store.migrated) for store in stores) == [0] * (replicas - 1) + [
            len(REVISIONS)
        ]
    finally:
        for store in stores:
            store.dispose()


def test_the_schema_command_names_the_revision_and_changes_nothing(tmp_path):
    env = {"LOOP_STORE_URL": f"sqlite:///{tmp_path / 'loop.db'}"}
    assert run_to_exit(["loop", "schema"], env) == (
        0,
        "the run store: no schema version (empty, or made before migrations); the next start "
        "applies l0001, l0002, l0003, l0004\n",
    )
    RunStore(env["LOOP_STORE_URL"]).dispose()
    assert run_to_exit(["loop", "schema"], env) == (
        0,
        f"the run store: schema at {MIGRATIONS.head} (newest)\n",
    )
