"""A throwaway PostgreSQL server for tests: Debian's server binaries, a cluster in a temporary
folder, a free loopback port, its unix socket in that folder; stopped and removed afterwards.

PostgreSQL refuses to run as root, so as root the cluster belongs to the `postgres` system user
(which Debian's package creates) and its commands run through `runuser`.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from tests.support import free_port, wait_until

DEBIAN_SERVER_DIRS = Path("/usr/lib/postgresql")
SERVER_USER = "postgres"
INSTALL_HINT = "install Debian's `postgresql` package (apt-get install postgresql)"


def server_bin_dir() -> Path | None:
    """The folder of initdb and pg_ctl: Debian keeps them per major version, off the PATH."""
    versions = [d / "bin" for d in DEBIAN_SERVER_DIRS.glob("*") if (d / "bin" / "initdb").exists()]
    if versions:
        return max(versions, key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else 0)
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def unavailable_reason() -> str | None:
    """Why no throwaway server can be started here, or None when one can."""
    if server_bin_dir() is None:
        return f"no PostgreSQL server binaries: {INSTALL_HINT}"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            return f"running as root and there is no `{SERVER_USER}` user to run PostgreSQL as"
    return None


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    socket_dir: Path

    @property
    def admin_url(self) -> str:
        """The superuser over the unix socket (trusted: only this machine can reach it)."""
        return URL.create(
            "postgresql+psycopg",
            username=SERVER_USER,
            database="postgres",
            query={"host": str(self.socket_dir), "port": str(self.port)},
        ).render_as_string(hide_password=False)

    def url(self, database: str, user: str, password: str) -> str:
        """A password login over TCP, as a service in a container would connect."""
        return URL.create(
            "postgresql+psycopg",
            username=user,
            password=password,
            host=self.host,
            port=self.port,
            database=database,
        ).render_as_string(hide_password=False)

    def create_database(self, name: str, owner_password: str | None = None) -> None:
        """A new empty database; with `owner_password`, owned by a login role of the same name."""
        engine = create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                if owner_password is not None:
                    # DDL takes no bind parameters: the literal is quoted by hand
                    literal = owner_password.replace("'", "''")
                    connection.execute(text(f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{literal}'"))
                    connection.execute(text(f'CREATE DATABASE "{name}" OWNER "{name}"'))
                else:
                    connection.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            engine.dispose()

    def drop_database(self, name: str) -> None:
        engine = create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        finally:
            engine.dispose()


def _as_server_user(argv: list[str]) -> list[str]:
    return ["runuser", "-u", SERVER_USER, "--", *argv] if os.geteuid() == 0 else argv


def _run_as_server_user(argv: list[str]) -> None:
    """Run a server command; a failure says which command and what it printed."""
    done = subprocess.run(_as_server_user(argv), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{Path(argv[0]).name} failed ({done.returncode}): {done.stderr.strip()[-2000:]}"
        )


@contextmanager
def throwaway_postgres(*, max_connections: int = 300) -> Iterator[PostgresServer]:
    """Start a fresh cluster; yield it once it accepts connections; stop and delete it."""
    reason = unavailable_reason()
    if reason:
        raise RuntimeError(reason)
    bin_dir = server_bin_dir()
    assert bin_dir is not None
    # Not pytest's tmp_path: that is private to the test user, and the server user must enter.
    root = Path(tempfile.mkdtemp(prefix="leave-postgres-"))
    data, sockets, log = root / "data", root / "sockets", root / "server.log"
    sockets.mkdir()
    if os.geteuid() == 0:
        owner = pwd.getpwnam(SERVER_USER)
        for path in (root, sockets):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    port = free_port()
    server = PostgresServer("127.0.0.1", port, sockets)
    pg_ctl = [str(bin_dir / "pg_ctl"), "-D", str(data)]
    started = False
    try:
        _run_as_server_user(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "-U",
                SERVER_USER,
                "-E",
                "UTF8",
                "--no-locale",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
            ]
        )
        # Throwaway data: no fsync (tests create a database each, which would otherwise sync).
        options = (
            f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 "
            f"-c max_connections={max_connections} -c fsync=off -c full_page_writes=off"
        )
        # -W: return at once; readiness is awaited below with pg_isready.
        _run_as_server_user([*pg_ctl, "-l", str(log), "-o", options, "-W", "start"])
        started = True
        pg_isready = [str(bin_dir / "pg_isready"), "-q", "-h", str(sockets), "-p", str(port)]
        wait_until(
            lambda: subprocess.run(pg_isready, check=False).returncode == 0,
            timeout=60,
            what=f"PostgreSQL on port {port} (log: {log})",
        )
        yield server
    finally:
        if started:
            subprocess.run(
                _as_server_user([*pg_ctl, "-m", "fast", "-w", "stop"]),
                check=False,
                capture_output=True,
            )
        shutil.rmtree(root, ignore_errors=True)
