"""Our services and operator commands started as forks of an interpreter that has imported them.

A fresh `python -m loop` spends 2 to 4 s of CPU importing its libraries before it does anything
(`python -X importtime`: the `openai` types, the MCP SDK, SQLAlchemy, Alembic), and `make test`
starts hundreds of servers and commands on a 2-core machine. Here a fork server — multiprocessing's
`forkserver`: a fresh interpreter, started once per test process, that imports those modules and
nothing else — forks a child for each start. The child is a real process with its own pid,
environment, working directory, standard streams and exit status (a signal it dies of included), and
runs the module's `__main__` as `python -m` would; only the interpreter's start and the imports are
shared, and they come from a process no test has touched.

`LEAVE_TEST_LAUNCH=exec` starts every one as its own interpreter instead, as before.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ops.compose import REPO_ROOT
from ops.services import ProcessHandle, exec_module

# What the children import, so that the fork server has it in memory before it forks. A module
# that fails to import is skipped by multiprocessing; the child then imports it itself.
PRELOAD = [
    "uvicorn",
    "uvicorn.loops.auto",
    "uvicorn.protocols.http.auto",
    "uvicorn.protocols.websockets.auto",
    "uvicorn.lifespan.on",
    "common.entrypoint",
    "common.tracing",
    "common.backup",
    "common.migrations",
    "loop.app",
    "loop.store",
    "loop.settings",
    "loop.migrations",
    "loop.export",
    "mcp_server.app",
    "mcp_server.admin",
    "mcp_server.settings",
    "mcp_server.migrations",
]

# Started as interpreters of their own even so: the simulator imports little (0.4 s), and the
# tests that hold it to its configured TTFT to 5 % measure its first requests, which in a fork
# would pay for copying the pages of the fork server's imports it writes to.
EXEC_MODULES = {"modelsim"}

_context = multiprocessing.get_context("forkserver")


def enabled() -> bool:
    return os.environ.get("LEAVE_TEST_LAUNCH", "fork") != "exec"


def start_server() -> None:
    """Start the fork server now, with this process's environment as it is: before a test has
    patched it (the server's environment is not the children's, but a library reading one at
    import would keep it)."""
    _context.set_forkserver_preload(PRELOAD)
    from multiprocessing import forkserver

    forkserver.ensure_running()


def _child(
    module_args: list[str],
    env: dict[str, str],
    cwd: str,
    stdin_path: str,
    stdout_path: str,
    stderr_path: str,
) -> None:
    """In the forked child: its environment and streams, then the module as `python -m` runs it."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    os.dup2(os.open(stdin_path, os.O_RDONLY), 0)
    os.dup2(os.open(stdout_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), 1)
    if stderr_path == stdout_path:
        os.dup2(1, 2)
    else:
        os.dup2(os.open(stderr_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), 2)
    # Line-buffered text streams on the new descriptors (multiprocessing closed stdin).
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(  # noqa: SIM115
        2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False
    )
    sys.argv = list(module_args)
    try:
        runpy.run_module(module_args[0], run_name="__main__", alter_sys=True)
    finally:
        # multiprocessing ends its children with os._exit: what `python` runs at exit, run here.
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()


class ForkedProcess:
    """The part of `subprocess.Popen` the harness and the tests use, for a forked child."""

    def __init__(self, args: list[str], process: multiprocessing.process.BaseProcess) -> None:
        self.args = args
        self._process = process

    @property
    def pid(self) -> int:
        assert self._process.pid is not None
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def start(
    module_args: list[str],
    env: Mapping[str, str],
    stdout_path: Path,
    *,
    stderr_path: Path | None = None,
    stdin_path: Path | None = None,
) -> ForkedProcess:
    """`python -m <module_args>` with the environment `env` (whole, as subprocess takes it),
    standard output appended to `stdout_path`, standard error to `stderr_path` (else the same)."""
    process = _context.Process(
        target=_child,
        args=(
            module_args,
            dict(env),
            str(REPO_ROOT),
            str(stdin_path or os.devnull),
            str(stdout_path),
            str(stderr_path or stdout_path),
        ),
        name=" ".join(module_args),
        daemon=True,  # ended with the test process should a test leave one running
    )
    process.start()
    return ForkedProcess(["python", "-m", *module_args], process)


def launch(module_args: list[str], env: Mapping[str, str], log_path: Path) -> ProcessHandle:
    """ops.services' module launcher for the tests: a fork, but for EXEC_MODULES."""
    if module_args[0] in EXEC_MODULES:
        return exec_module(module_args, env, log_path)
    return start(module_args, env, log_path)


def run_to_exit(
    module_args: list[str], env: Mapping[str, str], *, input: str | None = None, timeout: float = 60
) -> tuple[int, str, str]:
    """`python -m <module_args>` that should exit by itself: (status, stdout, stderr)."""
    with tempfile.TemporaryDirectory(prefix="forked-") as folder:
        out, err, stdin = (Path(folder) / name for name in ("out", "err", "in"))
        stdin.write_text(input or "", encoding="utf-8")
        child = start(module_args, env, out, stderr_path=err, stdin_path=stdin)
        try:
            status = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise
        return status, out.read_text(encoding="utf-8"), err.read_text(encoding="utf-8")
