"""The run store under concurrent writers. SQLite queues them (BEGIN IMMEDIATE); on
PostgreSQL (`--database-url`) they interleave, so a read-modify-write must lock its row."""

from __future__ import annotations

import threading

from loop.store import RunStore
from tests.loop.helpers import append, claim

WRITERS = 20


def test_concurrent_appends_to_one_session_all_stay(tmp_path, new_database_url):
    store = RunStore(new_database_url(tmp_path, "loop"))
    try:
        assert claim(store, "shared", "alice")
        start = threading.Barrier(WRITERS)
        accepted: list[bool] = []

        def append_one(i: int) -> None:
            start.wait()
            message = {"role": "user", "content": f"message {i}"}
            accepted.append(append(store, "shared", "alice", [message]))

        threads = [threading.Thread(target=append_one, args=(i,)) for i in range(WRITERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        kept = sorted(m["content"] for m in store.sync.history("shared", "alice"))
    finally:
        store.dispose()
    print(f"{WRITERS} concurrent appends to one session: {len(kept)} kept")
    assert accepted == [True] * WRITERS
    assert kept == sorted(f"message {i}" for i in range(WRITERS))
