"""Backups of a service's database that restore: `python -m mcp_server backup|restore PATH`
and `python -m loop backup|restore PATH`.

SQLite is copied online with SQLite's own backup API: a consistent snapshot of every
committed transaction, while the service keeps writing. PostgreSQL is copied with its own
tools (`pg_dump --format=custom`, `pg_restore`), which must be on the PATH where the command
runs (Debian's postgresql-client; in the compose stack, the `postgres` service has them).

Nothing is half-written: a backup is made next to its path and renamed into place only once it
is checked, and a restore checks the file is a backup of this database before it touches
anything. Every failure is one line (CommandError).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from contextlib import closing
from pathlib import Path
from urllib.parse import quote

from sqlalchemy.engine import URL, make_url

from .entrypoint import CommandError

SQLITE_HEADER = b"SQLite format 3\x00"
PG_DUMP_HEADER = b"PGDMP"


# The path that means standard output (backup) or standard input (restore): in a container,
# `compose exec -T … backup - > FILE` needs no copy in or out, nor a file the service's user
# can read.
STDIO = Path("-")


def backup(url: str, path: Path, tables: Iterable[str], what: str) -> str:
    """Copy the database at `url` to `path`; what was written, in words."""
    if path == STDIO:
        return _backup_to_stdout(url, tables, what)
    parsed = make_url(url)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise CommandError(f"backup: {folder} is not a folder")
    try:
        handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=folder)
    except OSError as error:
        raise CommandError(f"backup: cannot write in {folder}: {error.strerror}") from None
    os.close(handle)
    partial = Path(name)
    try:
        if parsed.get_backend_name() == "sqlite":
            _sqlite_backup(_sqlite_file(parsed, what), partial)
        else:
            _pg_dump(parsed, partial)
        check(partial, parsed, tables, what)
        os.replace(partial, path)
    finally:
        for leftover in (partial, *_companions(partial)):
            leftover.unlink(missing_ok=True)
    return f"backed up {what} to {path} ({path.stat().st_size:,} bytes)"


def _backup_to_stdout(url: str, tables: Iterable[str], what: str) -> str:
    if sys.stdout.isatty():
        raise CommandError("backup: standard output is a terminal: `backup - > FILE`")
    with tempfile.TemporaryDirectory(prefix="backup.") as folder:
        copy = Path(folder) / "backup"
        backup(url, copy, tables, what)
        with copy.open("rb") as source:
            shutil.copyfileobj(source, sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return f"backed up {what} to standard output ({copy.stat().st_size:,} bytes)"


def restore(url: str, path: Path, tables: Iterable[str], what: str) -> str:
    """Replace the database at `url` with the backup at `path` (stop the service first)."""
    if path == STDIO:
        return _restore_from_stdin(url, tables, what)
    parsed = make_url(url)
    if not path.is_file():
        raise CommandError(f"restore: no file {path}")
    check(path, parsed, tables, what)
    if parsed.get_backend_name() == "sqlite":
        target = Path(parsed.database or "")
        if not target.parent.is_dir():
            raise CommandError(f"restore: {target.parent} is not a folder")
        _sqlite_restore(path, target, what)
    else:
        _pg_restore(parsed, path)
    return f"restored {what} from {path}"


def _restore_from_stdin(url: str, tables: Iterable[str], what: str) -> str:
    if sys.stdin.isatty():
        raise CommandError("restore: standard input is a terminal: `restore - < FILE`")
    with tempfile.TemporaryDirectory(prefix="restore.") as folder:
        copy = Path(folder) / "backup"
        with copy.open("wb") as target:
            shutil.copyfileobj(sys.stdin.buffer, target)
        if copy.stat().st_size == 0:
            raise CommandError("restore: standard input was empty: `restore - < FILE`")
        restore(url, copy, tables, what)
    return f"restored {what} from standard input"


def check(path: Path, url: URL, tables: Iterable[str], what: str) -> None:
    """CommandError unless `path` is a whole backup of this kind of database with its tables."""
    wanted = set(tables)
    try:
        with path.open("rb") as file:
            head = file.read(16)
    except OSError as error:
        raise CommandError(f"restore: cannot read {path}: {error.strerror}") from None
    if url.get_backend_name() == "sqlite":
        if head != SQLITE_HEADER:
            raise CommandError(f"restore: {path} is not a SQLite backup of {what}")
        try:
            with closing(sqlite3.connect(_unchanging(path), uri=True)) as connection:
                integrity = connection.execute("PRAGMA integrity_check").fetchone()[0]
                found = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
        except sqlite3.Error as error:
            raise CommandError(f"restore: {path} cannot be read as SQLite: {error}") from None
        if integrity != "ok":
            raise CommandError(f"restore: {path} is damaged: {integrity}")
    else:
        if not head.startswith(PG_DUMP_HEADER):
            raise CommandError(f"restore: {path} is not a pg_dump backup of {what}")
        listed = _run([_tool("pg_restore"), "--list", str(path)], "pg_restore --list").stdout
        found = {line.split()[-2] for line in listed.splitlines() if " TABLE " in line}
    missing = sorted(wanted - found)
    if missing:
        raise CommandError(f"restore: {path} is not a backup of {what} (no {', '.join(missing)})")


def _sqlite_file(url: URL, what: str) -> Path:
    database = Path(url.database or "")
    if not url.database or not database.is_file():
        raise CommandError(f"backup: {what} is not at {url.database or 'an in-memory database'}")
    return database


def _companions(path: Path) -> list[Path]:
    """The files SQLite may keep beside a database: its write-ahead log, its shared-memory
    index, its rollback journal."""
    return [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm", "-journal")]


def _unchanging(path: Path) -> str:
    """The URI of a backup file, read-only and immutable: nothing writes it while it is read,
    so SQLite makes no -wal and -shm beside it (a file in WAL mode opened only read-only does,
    and leaves them there)."""
    return f"file:{quote(str(path.absolute()))}?mode=ro&immutable=1"


def _sqlite_backup(source: Path, target: Path) -> None:
    """SQLite's online backup: every page of one consistent snapshot of `source`, made a file
    of its own (rollback journal, not the live database's WAL mode), so that nothing that
    opens it later leaves files beside it."""
    try:
        with (
            closing(sqlite3.connect(f"file:{quote(str(source.absolute()))}?mode=ro", uri=True))
            as reader,
            closing(sqlite3.connect(target)) as writer,
        ):  # fmt: skip
            reader.backup(writer)  # in one step: the destination is written in one transaction
            writer.execute("PRAGMA journal_mode=DELETE")
    except sqlite3.Error as error:
        raise CommandError(f"cannot copy {source} to {target}: {error}") from None


def _sqlite_restore(backup_file: Path, target: Path, what: str) -> None:
    """`target` replaced by the backup, unless another process has it open: SQLite lets a
    database leave WAL mode (in which the services keep it) only on its sole connection, so
    the attempt is refused at once ("locked") while a server, or anything else, is on it.
    (A process that ended holds nothing: its locks went with it.)"""
    try:
        with (
            closing(sqlite3.connect(_unchanging(backup_file), uri=True)) as reader,
            closing(sqlite3.connect(target, timeout=0)) as writer,
        ):
            try:
                writer.execute("PRAGMA journal_mode=DELETE")
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) and "busy" not in str(error):
                    raise
                raise CommandError(
                    f"restore: {what} ({target}) is open in another process, a running "
                    "server most likely: stop it first (docs/operations.md#backups); nothing "
                    "was changed"
                ) from None
            reader.backup(writer)
    except sqlite3.Error as error:
        raise CommandError(f"cannot copy {backup_file} to {target}: {error}") from None


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise CommandError(
            f"{name} is not installed here: run this where PostgreSQL's client tools are "
            "(apt-get install postgresql-client), or in the compose stack's postgres service "
            "(docs/operations.md#backups)"
        )
    return found


def _libpq(url: URL) -> tuple[list[str], dict[str, str]]:
    """`--dbname` for `url` as a libpq URI (its query keeps e.g. a socket `host` or `sslmode`);
    the password goes in the environment, not in argv where `ps` shows it."""
    uri = url.set(drivername="postgresql", password=None).render_as_string(hide_password=False)
    env = dict(os.environ)
    if url.password:
        env["PGPASSWORD"] = str(url.password)
    return [f"--dbname={uri}"], env


def _pg_dump(url: URL, target: Path) -> None:
    options, env = _libpq(url)
    _run([_tool("pg_dump"), *options, "--format=custom", f"--file={target}"], "pg_dump", env)


def _pg_restore(url: URL, path: Path) -> None:
    options, env = _libpq(url)
    command = [_tool("pg_restore"), *options, "--clean", "--if-exists", "--no-owner",
               "--single-transaction", str(path)]  # fmt: skip
    _run(command, "pg_restore", env)


def _run(
    command: list[str], what: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise CommandError(f"{what} failed: {said[-1] if said else done.returncode}")
    return done
