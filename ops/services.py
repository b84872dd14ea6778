"""Our services as child processes on free ports, ready when their health URL answers.

The release gate (python -m evals, which a site runs on a new fine-tune) starts its scratch MCP
server and loop this way; tests and benchmarks start the real servers the same way (over real
sockets, not in-process), and harness/ adds what only they start.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

# httpx2, a runtime dependency: `make promote` runs the gate in the bundle image, which has no
# httpx (a development and load-test dependency only)
import httpx2

from .compose import REPO_ROOT


class ProcessHandle(Protocol):
    """What is used of a started process: `subprocess.Popen`'s names."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


# Starts `python -m <module_args>` with this whole environment, its output appended to a file.
ModuleLauncher = Callable[[list[str], Mapping[str, str], Path], ProcessHandle]


def exec_module(module_args: list[str], env: Mapping[str, str], log_path: Path) -> ProcessHandle:
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", *module_args],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


# The test harness puts a fork server here (harness/forkserver.py): the same processes, without
# an interpreter's start and imports for each.
module_launcher: ModuleLauncher = exec_module


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll `condition` until it holds; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    poll = threading.Event()
    interval = 0.02
    while time.monotonic() < deadline:
        if condition():
            return
        poll.wait(interval)
        interval = min(interval * 1.5, 0.25)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def http_ok(url: str) -> bool:
    try:
        return httpx2.get(url, timeout=1.0).status_code == 200
    except httpx2.HTTPError:
        return False


class ServiceProcess:
    """A `python -m <module>` child process with its log captured to a file."""

    def __init__(
        self,
        module_args: list[str],
        env: Mapping[str, str],
        log_path: Path,
        *,
        argv: list[str] | None = None,
    ) -> None:
        """`python -m <module_args>`, or any program given as `argv`."""
        self.log_path = log_path
        log_path.write_bytes(b"")
        full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        self.process: ProcessHandle
        if argv is None:
            self.process = module_launcher(module_args, full_env, log_path)
        else:
            with log_path.open("ab") as log:
                self.process = subprocess.Popen(
                    argv, cwd=REPO_ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT
                )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, url: str, timeout: float = 90.0) -> None:
        # Generous: a service starts in a few seconds alone, but `make test` starts several at
        # once on two cores; one that exits is reported at once, whatever the timeout.
        def ready() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"process exited ({self.process.returncode}):\n{self.log()}")
            return http_ok(url)

        wait_until(ready, timeout=timeout, what=url)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextmanager
def running(
    module_args: list[str],
    env: Mapping[str, str],
    log_path: Path,
    ready_url: str,
    *,
    argv: list[str] | None = None,
) -> Iterator[ServiceProcess]:
    service = ServiceProcess(module_args, env, log_path, argv=argv)
    try:
        service.wait_ready(ready_url)
        yield service
    finally:
        service.stop()


def seed_database(db_url: str) -> None:
    """The demo data, as `python -m mcp_server seed` writes it, written from this process: the
    seed itself takes milliseconds, a fresh interpreter importing the server two seconds of CPU,
    paid for every MCP server a test or `make dev` starts (the command has tests of its own)."""
    from mcp_server.seed import seed
    from mcp_server.storage import Database

    database = Database(db_url)
    try:
        database.create_schema()
        seed(database)
    finally:
        database.dispose()


@contextmanager
def mcp_server(
    workdir: Path, db_url: str | None = None, seed: bool = True, **env: str
) -> Iterator[str]:
    """`python -m mcp_server` on a free port (on `db_url`, else a new SQLite file in `workdir`),
    on the demo data unless `seed` is false; yields its base URL."""
    port = free_port()
    db_url = db_url or f"sqlite:///{workdir / f'leave-{port}.db'}"
    if seed:
        seed_database(db_url)
    settings = {"MCP_DATABASE_URL": db_url, "MCP_PORT": str(port), **env}
    base = f"http://127.0.0.1:{port}"
    with running(["mcp_server"], settings, workdir / f"mcp-{port}.log", f"{base}/readyz"):
        yield base


@contextmanager
def loop_service(
    workdir: Path, model_url: str, mcp_url: str, store_url: str | None = None, **env: str
) -> Iterator[tuple[str, str]]:
    """`python -m loop` on a free port (its store at `store_url`, else a new SQLite file);
    yields (base URL, store URL). `peer_url="self"`: the other loops on its store reach it at
    its own URL."""
    port = free_port()
    store_url = store_url or f"sqlite:///{workdir / f'loop-{port}.db'}"
    base = f"http://127.0.0.1:{port}"
    if env.get("peer_url") == "self":
        env["peer_url"] = base
    settings = {
        "LOOP_PORT": str(port),
        "LOOP_MODEL_BASE_URL": model_url,
        "LOOP_MCP_URL": mcp_url,
        "LOOP_STORE_URL": store_url,
        **{f"LOOP_{k.upper()}": v for k, v in env.items()},
    }
    with running(["loop"], settings, workdir / f"loop-{port}.log", f"{base}/healthz"):
        yield base, store_url


@contextmanager
def model_simulator(workdir: Path, **env: str) -> Iterator[str]:
    """`python -m modelsim` on a free port (SIM_* from keyword arguments); yields its base URL."""
    port = free_port()
    settings = {"SIM_PORT": str(port), **{f"SIM_{k.upper()}": v for k, v in env.items()}}
    base = f"http://127.0.0.1:{port}"
    with running(["modelsim"], settings, workdir / f"sim-{port}.log", f"{base}/health"):
        yield base
