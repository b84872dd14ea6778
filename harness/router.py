"""The compose file's vllm-router as a local process in front of replicas of the tests' or a
benchmark's choosing, on free ports (tests/router, tests/monitoring, make bench-router)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ops.compose import config
from ops.services import free_port, running


def router_argv(
    command: list[str], workers: list[str], port: int, metrics_port: int, **flags: str
) -> list[str]:
    """The router's compose command, as a local process on `port` in front of `workers`
    (flags given here, e.g. policy="round_robin", replace the compose file's)."""
    wanted = {"host": "127.0.0.1", "port": str(port), "prometheus-host": "127.0.0.1",
              "prometheus-port": str(metrics_port)}  # fmt: skip
    wanted |= {name.replace("_", "-"): value for name, value in flags.items()}
    argv = [str(Path(sys.executable).parent / command[0])]
    for argument in command[1 : command.index("--worker-urls")]:
        name = argument.removeprefix("--").partition("=")[0]
        argv.append(f"--{name}={wanted.pop(name)}" if name in wanted else argument)
    return [*argv, *(f"--{name}={value}" for name, value in wanted.items()), "--worker-urls",
            *workers]  # fmt: skip


@contextmanager
def vllm_router(workdir: Path, workers: list[str], **flags: str) -> Iterator[tuple[str, str]]:
    """The compose file's vllm-router in front of `workers`, as a process on free ports;
    yields (its base URL, its metrics URL) once it says it is ready."""

    command = config(sim=True)["services"]["vllm-router"]["command"]
    port, metrics_port = free_port(), free_port()
    argv = router_argv(command, workers, port, metrics_port, **flags)
    base = f"http://127.0.0.1:{port}"
    with running([], {}, workdir / f"router-{port}.log", f"{base}/readiness", argv=argv):
        yield base, f"http://127.0.0.1:{metrics_port}/metrics"
