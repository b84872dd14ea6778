"""Backups that restore, made as the operator makes them (`python -m mcp_server backup|restore`,
`python -m loop backup|restore`) while the service writes: every change committed before the
backup is in the restored copy, and the restored server starts and serves. On SQLite here, on
PostgreSQL (pg_dump, pg_restore) in the reliability tier's run of this folder."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from pathlib import Path

import anyio.to_thread
import httpx
import pytest

from common import backup
from common.entrypoint import CommandError
from loop.store import RunRecord, RunStore
from tests.support import mcp_server, run_to_exit, run_with_files, seed_database

from .helpers import find
from .http_session import session


async def test_a_leave_database_backed_up_while_the_server_writes_restores_whole(
    tmp_path, new_database_url
):
    source = new_database_url(tmp_path, "live")
    with mcp_server(tmp_path, source) as base:
        committed: list[str] = []  # each create_leave whose answer came back
        stop = asyncio.Event()
        changed = asyncio.Condition()

        async def until_written(count: int) -> None:
            async with changed:
                await asyncio.wait_for(changed.wait_for(lambda: len(committed) >= count), 60)

        async def write() -> None:
            async with session(f"{base}/mcp", "demo-token-other", "auto") as client:
                day = dt.date(2031, 1, 6)
                while not stop.is_set():
                    created = await client.call_tool(
                        "create_leave",
                        {"leave_type": "事假", "start_date": day.isoformat(),
                         "end_date": day.isoformat(), "reason": "備份測試"},
                    )  # fmt: skip
                    if not created.is_error:
                        async with changed:
                            committed.append(created.structured_content["leave_id"])
                            changed.notify_all()
                    day += dt.timedelta(days=7)

        writer = asyncio.create_task(write())
        await until_written(5)  # the writes are under way
        before_backup = list(committed)
        backup = ["mcp_server", "backup", str(tmp_path / "leave.backup")]
        status, said = await anyio.to_thread.run_sync(
            run_to_exit, backup, {"MCP_DATABASE_URL": source}
        )
        during = len(committed) - len(before_backup)
        # one client writes one at a time: those after the next answer began after the backup
        after = len(committed) + 1
        await until_written(after + 2)
        stop.set()
        await writer
    assert status == 0, said
    assert said.startswith("backed up the leave database to")
    assert during > 0, "no write ran alongside the backup"
    # restored over the database it was taken from (the server stopped), as after a bad day
    restored = source
    status, said = run_to_exit(["mcp_server", "restore", str(tmp_path / "leave.backup")],
                               {"MCP_DATABASE_URL": restored})  # fmt: skip
    assert status == 0, said
    with mcp_server(tmp_path, restored, seed=False) as base:
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{base}/readyz")).json()["status"] == "ready"
        async with session(f"{base}/mcp", "demo-token-other", "auto") as client:
            found = {leave["leave_id"] for leave in await find(client, "備份測試")}
    # the restored server serves what was written, and nothing it never was
    assert found and found <= set(committed)
    _all_present(restored, before_backup)
    assert _written(restored) <= set(committed[:after])  # the later writes are gone


def _written(url: str) -> set[str]:
    from mcp_server.storage import Database, Leave

    db = Database(url)
    try:
        with db.read() as s:
            return {leave.id for leave in s.query(Leave).filter(Leave.reason == "備份測試")}
    finally:
        db.dispose()


def _all_present(url: str, leave_ids: list[str]) -> None:
    from mcp_server.storage import Database, Leave

    db = Database(url)
    try:
        with db.read() as s:
            present = {leave.id for leave in s.query(Leave).filter(Leave.id.in_(leave_ids))}
    finally:
        db.dispose()
    assert present == set(leave_ids), set(leave_ids) - present


def test_a_run_store_backed_up_while_runs_are_written_restores_whole(tmp_path, new_database_url):
    source = new_database_url(tmp_path, "loop")
    store = RunStore(source)
    written: list[str] = []
    stop = threading.Event()

    def write() -> None:
        number = 0
        while not stop.is_set():
            record = RunRecord(id=f"run_{number:06d}", user_key="k", session_id="s",
                               status="completed", input="查一下我的假單")  # fmt: skip
            store.sync.begin_run(record, claim_session=False)
            written.append(record.id)
            number += 1

    writer = threading.Thread(target=write)
    writer.start()
    try:
        while len(written) < 20:
            threading.Event().wait(0.01)
        before = list(written)
        status, said = run_to_exit(["loop", "backup", str(tmp_path / "loop.backup")],
                                   {"LOOP_STORE_URL": source})  # fmt: skip
        during = len(written) - len(before)
    finally:
        stop.set()
        writer.join()
        store.dispose()
    assert status == 0, said
    assert during > 0
    restored = new_database_url(tmp_path, "loop-restored")
    assert run_to_exit(["loop", "restore", str(tmp_path / "loop.backup")],
                       {"LOOP_STORE_URL": restored})[0] == 0  # fmt: skip
    copy = RunStore(restored)
    try:
        assert all(copy.sync.get_run(run_id, "k") is not None for run_id in before)
    finally:
        copy.dispose()


def test_a_backup_that_cannot_be_written_and_a_file_that_is_no_backup_are_one_line(
    tmp_path, new_database_url
):
    url = new_database_url(tmp_path, "live")
    env = {"MCP_DATABASE_URL": url}
    seed_database(env["MCP_DATABASE_URL"])
    (tmp_path / "a-file").write_text("")
    status, said = run_to_exit(["mcp_server", "backup", str(tmp_path / "a-file" / "x")], env)
    assert (status, said.strip()) == (2, f"error: backup: {tmp_path / 'a-file'} is not a folder")
    assert not list(tmp_path.glob(".*.partial"))
    junk = tmp_path / "notes.txt"
    junk.write_text("not a backup\n")
    status, said = run_to_exit(["mcp_server", "restore", str(junk)], env)
    assert status == 2 and said.startswith("error: restore: ")
    assert "is not a" in said and len(said.strip().splitlines()) == 1
    # the database it was to replace is untouched
    assert run_to_exit(["mcp_server", "list-tokens"], env)[1].count("demo") >= 3
    # a backup of the other service's database is no backup of this one
    other = tmp_path / "loop.backup"
    loop_url = new_database_url(tmp_path, "loopdb")
    RunStore(loop_url).dispose()
    assert run_to_exit(["loop", "backup", str(other)], {"LOOP_STORE_URL": loop_url})[0] == 0
    status, said = run_to_exit(["mcp_server", "restore", str(other)], env)
    assert status == 2 and "is not a backup of the leave database (no " in said


def test_a_backup_goes_to_standard_output_and_a_restore_reads_standard_input(
    tmp_path, new_database_url
):
    """`compose exec -T mcp-server … backup - > FILE`: no file to copy out of the container, nor
    one the service's user cannot read to copy in."""
    source = new_database_url(tmp_path, "live")
    seed_database(source)
    saved = tmp_path / "leave.backup"
    status, said = run_with_files(
        ["mcp_server", "backup", "-"], {"MCP_DATABASE_URL": source}, stdout=saved
    )
    assert status == 0, said
    assert said.startswith("backed up the leave database to standard output (")
    restored = new_database_url(tmp_path, "restored")
    status, said = run_with_files(
        ["mcp_server", "restore", "-"], {"MCP_DATABASE_URL": restored}, stdin=saved
    )
    assert status == 0, said
    assert said.strip() == "restored the leave database from standard input"
    assert len(_leave_ids(restored)) == len(_leave_ids(source)) > 0

    status, said = run_with_files(["mcp_server", "restore", "-"], {"MCP_DATABASE_URL": restored})
    assert status == 2
    assert said.strip() == "error: restore: standard input was empty: `restore - < FILE`"
    assert len(_leave_ids(restored)) == len(_leave_ids(source))

    loop_url = new_database_url(tmp_path, "loop")
    RunStore(loop_url).dispose()
    loop_saved = tmp_path / "loop.backup"
    status, said = run_with_files(
        ["loop", "backup", "-"], {"LOOP_STORE_URL": loop_url}, stdout=loop_saved
    )
    assert status == 0 and loop_saved.stat().st_size > 0, said
    # the loop's backup is no leave database
    status, said = run_with_files(
        ["mcp_server", "restore", "-"], {"MCP_DATABASE_URL": restored}, stdin=loop_saved
    )
    assert status == 2
    assert "is not a backup of the leave database" in said


def test_a_backup_file_that_cannot_be_read_is_named_not_the_database(tmp_path, monkeypatch):
    """A file copied into a container as root, 0600, is unreadable to the service's user: the
    error names the file (it named MCP_DATABASE_URL, as if the database could not be opened)."""
    backup_file = tmp_path / "restore.backup"
    backup_file.write_bytes(backup.SQLITE_HEADER)
    real_open = Path.open

    def unreadable(path: Path, *args, **kwargs):
        if path == backup_file:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(Path, "open", unreadable)
    url = f"sqlite:///{tmp_path / 'leave.db'}"
    with pytest.raises(CommandError) as refused:
        backup.restore(url, backup_file, ["leaves"], "the leave database")
    assert str(refused.value) == f"restore: cannot read {backup_file}: Permission denied"


def _leave_ids(url: str) -> set[str]:
    from mcp_server.storage import Database, Leave

    db = Database(url)
    try:
        with db.read() as s:
            return {leave.id for leave in s.query(Leave)}
    finally:
        db.dispose()


def _beside(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def test_backup_and_restore_leave_no_files_beside_theirs(tmp_path):
    """`backup PATH` left `.PATH.<random>.partial-shm` and `-wal` beside it (a daily job piled
    them up); `restore FILE` left `FILE-shm` and `FILE-wal`, even when it refused the file."""
    live, backups, restored = (tmp_path / name for name in ("live", "backups", "restored"))
    for folder in (live, backups, restored):
        folder.mkdir()
    env = {"MCP_DATABASE_URL": f"sqlite:///{live / 'leave.db'}"}
    seed_database(env["MCP_DATABASE_URL"])
    for day in ("mon", "tue"):
        status, said = run_to_exit(["mcp_server", "backup", str(backups / f"{day}.backup")], env)
        assert status == 0, said
    assert _beside(backups) == ["mon.backup", "tue.backup"]

    into = {"MCP_DATABASE_URL": f"sqlite:///{restored / 'leave.db'}"}
    status, said = run_to_exit(["mcp_server", "restore", str(backups / "mon.backup")], into)
    assert status == 0, said
    assert _beside(backups) == ["mon.backup", "tue.backup"]
    assert len(_leave_ids(into["MCP_DATABASE_URL"])) == len(_leave_ids(env["MCP_DATABASE_URL"]))

    # a copy of a database in WAL mode, as an older backup or a plain copy of the file is
    (backups / "copy.backup").write_bytes((live / "leave.db").read_bytes())
    status, said = run_to_exit(["mcp_server", "restore", str(backups / "copy.backup")], into)
    assert status == 0, said
    loop_file = backups / "loop.backup"  # refused: a backup of the other service's database
    loop_url = f"sqlite:///{tmp_path / 'loop.db'}"
    RunStore(loop_url).dispose()
    assert run_to_exit(["loop", "backup", str(loop_file)], {"LOOP_STORE_URL": loop_url})[0] == 0
    status, said = run_to_exit(["mcp_server", "restore", str(loop_file)], into)
    assert status == 2 and "is not a backup of the leave database" in said
    assert _beside(backups) == ["copy.backup", "loop.backup", "mon.backup", "tue.backup"]


def test_restore_refuses_a_database_a_running_server_has_open(tmp_path):
    """The runbook says to stop the server first; restore went ahead under a live one, whose
    open connections then saw the file change beneath them."""
    url = f"sqlite:///{tmp_path / 'leave.db'}"
    env = {"MCP_DATABASE_URL": url}
    saved = tmp_path / "leave.backup"
    with mcp_server(tmp_path, url) as base:
        assert httpx.get(f"{base}/readyz", timeout=10).status_code == 200
        assert run_to_exit(["mcp_server", "backup", str(saved)], env)[0] == 0
        before = _leave_ids(url)
        status, said = run_to_exit(["mcp_server", "restore", str(saved)], env)
        assert (status, said.strip()) == (
            2,
            f"error: restore: the leave database ({tmp_path / 'leave.db'}) is open in another "
            "process, a running server most likely: stop it first "
            "(docs/operations.md#backups); nothing was changed",
        )
        assert _leave_ids(url) == before
    status, said = run_to_exit(["mcp_server", "restore", str(saved)], env)  # stopped: it runs
    assert (status, said.strip()) == (0, f"restored the leave database from {saved}")
