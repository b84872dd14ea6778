"""Test helpers: the services as processes (from ops.services), and one-shot runs."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn

from harness import forkserver
from ops.compose import REPO_ROOT
from ops.services import (
    ServiceProcess,
    free_port,
    http_ok,
    loop_service,
    mcp_server,
    model_simulator,
    running,
    seed_database,
    wait_until,
)

__all__ = [
    "REPO_ROOT",
    "ServiceProcess",
    "free_port",
    "http_ok",
    "loop_service",
    "mcp_server",
    "model_simulator",
    "port_in_use",
    "run_command",
    "run_to_exit",
    "run_with_files",
    "running",
    "seed_database",
    "serving_in_thread",
    "wait_until",
    "wait_until_async",
]


@contextmanager
def serving_in_thread(app: Any, what: str) -> Iterator[str]:
    """`app` served by uvicorn on a free local port, in a thread of this process: its base URL,
    once it accepts connections."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, timeout=10, what=what)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def run_command(
    module_args: list[str],
    env: Mapping[str, str],
    *,
    input: str | None = None,
    timeout: float = 60,
) -> tuple[int, str, str]:
    """`python -m <module_args>` that should exit by itself: (status, stdout, stderr). Forked
    from the fork server (harness/forkserver.py), or its own interpreter under
    LEAVE_TEST_LAUNCH=exec."""
    if forkserver.enabled():
        return forkserver.run_to_exit(
            module_args, {**os.environ, **env}, input=input, timeout=timeout
        )
    done = subprocess.run(
        [sys.executable, "-m", *module_args],
        cwd=REPO_ROOT,
        env={**os.environ, **env},
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done.returncode, done.stdout, done.stderr


def run_to_exit(
    module_args: list[str],
    env: Mapping[str, str],
    *,
    input: str | None = None,
    timeout: float = 60,
) -> tuple[int, str]:
    """`python -m <module_args>` that should exit by itself: (status, stdout + stderr)."""
    status, out, err = run_command(module_args, env, input=input, timeout=timeout)
    return status, out + err


def run_with_files(
    module_args: list[str],
    env: Mapping[str, str],
    *,
    stdin: Path | None = None,
    stdout: Path | None = None,
    timeout: float = 120,
) -> tuple[int, str]:
    """`python -m … < STDIN > STDOUT` (each only if given): (status, stderr)."""
    with tempfile.TemporaryDirectory(prefix="run-") as folder:
        err = Path(folder) / "err"
        out = stdout or Path(folder) / "out"
        full_env = {**os.environ, **env}
        if forkserver.enabled():
            child = forkserver.start(module_args, full_env, out, stderr_path=err, stdin_path=stdin)
            try:
                status = child.wait(timeout)
            finally:
                child.kill()
        else:
            with (
                open(stdin or os.devnull, "rb") as given,
                open(out, "wb") as taken,
                open(err, "wb") as said,
            ):
                status = subprocess.run(
                    [sys.executable, "-m", *module_args],
                    cwd=REPO_ROOT, env=full_env, stdin=given, stdout=taken, stderr=said,
                    timeout=timeout, check=False,
                ).returncode  # fmt: skip
        return status, err.read_text(encoding="utf-8")


async def wait_until_async(
    condition: Callable[[], Awaitable[bool]], *, within: float, what: str
) -> None:
    """wait_until for a condition that is awaited: polled with the same backoff, on the event
    loop; fails naming `what` after `within` seconds."""
    deadline = time.monotonic() + within
    interval = 0.02
    while not await condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {within:.0f}s waiting for {what}")
        await asyncio.wait([asyncio.get_running_loop().create_future()], timeout=interval)
        interval = min(interval * 1.5, 0.25)


@contextmanager
def port_in_use() -> Iterator[int]:
    """A loopback port that something is listening on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]
