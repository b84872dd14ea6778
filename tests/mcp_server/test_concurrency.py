"""Conflicting writes at once, straight at the rules (threads, each with its own transaction):
exactly one wins, and the books still balance. Under `--database-url` these run on PostgreSQL,
whose writers do not queue as SQLite's do (BEGIN IMMEDIATE) but interleave row by row."""

from __future__ import annotations

import datetime as dt
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable

from common.sqlite import create_engine_for
from mcp_server.leaves import LeaveService
from mcp_server.messages import Refusal
from mcp_server.migrations import MIGRATIONS
from mcp_server.seed import seed
from mcp_server.storage import Database

from .invariants import assert_books_balance
from .ledger import balance_of, status_of

ATTEMPTS = 50


def all_at_once(attempts: int, work: Callable[[int], object]) -> Counter[str]:
    """Run `work(i)` in `attempts` threads released together; count "applied" and refusals."""
    start = threading.Barrier(attempts)
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def attempt(i: int) -> None:
        start.wait()
        try:
            work(i)
            outcome = "applied"
        except Refusal as refusal:
            outcome = refusal.code
        with lock:
            outcomes[outcome] += 1

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(attempts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def submitted_leave(service: LeaveService, leave_type: str, start: str, end: str) -> str:
    leave_id = service.create("E002", leave_type, start, end, "併發測試").leave_id
    service.change_status("E002", leave_id, "submitted")
    return leave_id


def test_fifty_threads_deciding_one_leave_apply_exactly_once(service):
    leave_id = service.search("E002", "搬家", None)[0].leave_id
    before = balance_of(service, "E002", "事假")

    outcomes = all_at_once(
        ATTEMPTS,
        lambda i: service.change_status("M001", leave_id, "approved" if i % 2 else "rejected"),
    )

    final = status_of(service, leave_id)
    after = balance_of(service, "E002", "事假")
    books = assert_books_balance(service.db)
    print(
        f"{ATTEMPTS} concurrent approve/reject: {dict(outcomes)}; final {final}; "
        f"事假 balance {before} → {after}; books balance over {books.leaves} leaves, "
        f"{books.audit_entries} audit entries"
    )
    assert outcomes["applied"] == 1
    assert set(outcomes) - {"applied"} <= {"wrong_step", "conflict", "use_cancel_tool"}
    assert after == before - (1 if final == "approved" else 0)
    decisions = [e for e in service.audit_trail(leave_id) if e.from_status == "submitted"]
    assert [(e.to_status, e.outcome) for e in decisions] == [(final, "applied")]


def test_approvals_racing_for_the_last_days_of_a_balance_lose_as_conflicts(service):
    # 補休 starts at 2 days; this leave takes both. A loser must learn that the leave was
    # decided, not that the balance (which the winner just used) is short.
    leave_id = submitted_leave(service, "補休", "2033-01-03", "2033-01-04")
    assert balance_of(service, "E002", "補休") == 2

    outcomes = all_at_once(ATTEMPTS, lambda _i: service.change_status("M001", leave_id, "approved"))

    books = assert_books_balance(service.db)
    print(f"{ATTEMPTS} concurrent approvals of the whole 補休 balance: {dict(outcomes)}")
    assert outcomes["applied"] == 1
    assert set(outcomes) - {"applied"} <= {"conflict", "use_cancel_tool"}, outcomes
    assert balance_of(service, "E002", "補休") == 0 and books.approved_days > 0


def test_overlapping_leaves_created_at_once_are_created_once(service):
    outcomes = all_at_once(
        ATTEMPTS,
        lambda i: service.create("E001", "特休", "2033-02-07", f"2033-02-{8 + i % 3:02d}", "同時"),
    )

    created = [v for v in service.search("E001", "同時", None)]
    print(f"{ATTEMPTS} concurrent overlapping creations: {dict(outcomes)}")
    assert outcomes == Counter({"applied": 1, "overlap": ATTEMPTS - 1})
    assert len(created) == 1


def test_cancelling_one_leave_at_once_restores_its_days_once(service):
    wedding = service.search("E001", "婚禮", None)[0]
    before = balance_of(service, "E001", "特休")

    outcomes = all_at_once(ATTEMPTS, lambda _i: service.cancel_approved("E001", wedding.leave_id))

    books = assert_books_balance(service.db)
    print(f"{ATTEMPTS} concurrent accepted cancels: {dict(outcomes)}")
    assert outcomes["applied"] == 1
    assert set(outcomes) - {"applied"} <= {"conflict", "not_cancellable"}
    assert balance_of(service, "E001", "特休") == before + wedding.days
    trail = service.audit_trail(wedding.leave_id)
    assert [e.outcome for e in trail].count("applied") == 1
    assert len(trail) == ATTEMPTS and books.audit_entries >= ATTEMPTS


def test_replicas_sweeping_abandoned_confirmations_at_once_audit_each_once(service):
    wedding = service.search("E001", "婚禮", None)[0].leave_id
    asked = 20
    for _ in range(asked):
        service.confirmation_asked("E001", wedding, "cancel_approved_leave")
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    swept: list[int] = []

    sweepers = 4  # as many replicas, each with its own sweeper
    outcomes = all_at_once(sweepers, lambda _i: swept.append(service.audit_abandoned(later)))

    abandoned = [e for e in service.audit_trail(wedding) if e.confirmation == "abandoned"]
    print(f"{sweepers} concurrent sweeps of {asked} abandoned confirmations: {swept}")
    assert outcomes["applied"] == sweepers
    assert sum(swept) == asked and len(abandoned) == asked


def test_replicas_creating_the_schema_at_once_all_start(tmp_path, new_database_url):
    url = new_database_url(tmp_path, "fresh")  # empty: no replica finds the tables made
    databases = [Database(url) for _ in range(8)]
    try:
        outcomes = Counter()
        migrated: list[int] = []
        start = threading.Barrier(len(databases))
        lock = threading.Lock()

        def create(database: Database) -> None:
            start.wait()
            try:
                migrated.append(len(database.create_schema()))
                outcome = "created"
            except Exception as error:
                outcome = type(error).__name__
            with lock:
                outcomes[outcome] += 1

        threads = [threading.Thread(target=create, args=(d,)) for d in databases]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        print(f"{len(databases)} concurrent schema creations: {dict(outcomes)}")
        assert outcomes == Counter({"created": len(databases)})
        # one applied every revision; the others waited for it and found nothing to do
        revisions = len(list(MIGRATIONS.script().walk_revisions()))
        assert sorted(migrated) == [0] * (len(databases) - 1) + [revisions]
        assert seed(databases[0]) is True
    finally:
        for database in databases:
            database.dispose()


def test_a_connection_waits_for_a_writer_of_a_fresh_database_to_switch_it_to_wal(tmp_path):
    """SQLite answers PRAGMA journal_mode=WAL "database is locked" at once, without the busy
    handler, while another connection writes a database still in rollback mode: a replica
    starting beside one creating the schema failed to connect (1 in 8, now and then)."""
    path = tmp_path / "fresh.db"
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("CREATE TABLE first (x)")
    released = threading.Timer(0.3, writer.execute, args=("COMMIT",))
    released.start()
    engine = create_engine_for(f"sqlite:///{path}")
    try:
        with engine.connect() as connection:
            mode = connection.exec_driver_sql("PRAGMA journal_mode").scalar()
    finally:
        released.join()
        engine.dispose()
        writer.close()
    assert mode == "wal"
