"""Is the compose stack really up? Every service's state and health, and the readiness endpoints.

`docker compose up --wait` has returned 0 while a service was still starting (seen through
podman), so `make up` asks each service itself before it reports success, and otherwise names
the service that is not ready with the last lines of its log.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.healthprobe import probe

from .compose import BASE_FILE, DEPLOY, REPO_ROOT, SIM_FILE, ComposeError, host_ports, project_json

# Published services whose readiness endpoint says more than the container's health: the
# loop's /readyz checks the model server and the MCP server from inside the network.
READINESS_PATHS = {"loop": "/readyz", "mcp-server": "/readyz"}
LOG_LINES = 20
CONFIG_COMMAND = "`docker compose config --format json`"


@dataclass(frozen=True)
class Stack:
    """The compose command `make up` uses: the same files, env file and site overrides."""

    sim: bool
    env_file: Path
    extra_files: tuple[Path, ...] = ()
    environ: Mapping[str, str] | None = None  # for `docker`; None: this process's
    engine: str = "docker"  # make's ENGINE: "podman" goes through `python -m ops podman`

    def command(self, *args: str) -> list[str]:
        files = [BASE_FILE, *([SIM_FILE] if self.sim else []), *self.extra_files]
        command = [*compose_command(self.engine), "--project-directory", str(DEPLOY)]
        command += ["--env-file", str(self.env_file)]
        if not self.sim:
            command += ["--profile", "gpu"]  # as `make up` runs it: with dcgm-exporter
        for file in files:
            command += ["-f", str(file)]
        return command + list(args)

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args),
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            timeout=timeout,
            env=self.environ,
        )


def compose_command(engine: str) -> list[str]:
    """What stands for `docker compose` on the engine (make's ENGINE)."""
    if engine == "podman":
        return [sys.executable, "-m", "ops", "podman", "compose"]
    return ["docker", "compose"]


def _json_lines(text: str) -> list[dict[str, Any]]:
    text = text.strip()
    if text.startswith("["):  # older Compose versions print one array
        listed: list[dict[str, Any]] = json.loads(text)
        return listed
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def problems(stack: Stack) -> dict[str, str]:
    """Service name → why it is not ready; empty when every service is."""
    config = stack.run("config", "--format", "json")
    if config.returncode != 0:
        return {"compose": config.stderr.strip() or "`docker compose config` failed"}
    try:
        services: dict[str, Any] = project_json(config.stdout, CONFIG_COMMAND)["services"]
    except ComposeError as error:
        return {"compose": str(error)}
    listed = stack.run("ps", "--all", "--format", "json")
    if listed.returncode != 0:
        return {"compose": listed.stderr.strip() or "`docker compose ps` failed"}
    try:
        containers = {c["Service"]: c for c in _json_lines(listed.stdout)}
    except (json.JSONDecodeError, TypeError, KeyError):
        said = listed.stdout.strip()[:120] or "nothing"
        return {
            "compose": f"`docker compose ps --format json` printed no container list (it "
            f"printed {said!r}): the bundle needs the Docker Compose v2 plugin"
        }
    found: dict[str, str] = {}
    for name, spec in services.items():
        container = containers.get(name)
        if container is None:
            found[name] = "no container"
            continue
        state, health = container.get("State", ""), container.get("Health", "")
        if spec.get("restart") == "no":  # a one-shot job: done, successfully
            if state != "exited" or container.get("ExitCode") != 0:
                found[name] = f"one-shot job {state}, exit code {container.get('ExitCode')}"
            continue
        if state != "running":
            found[name] = f"{state} ({container.get('Status', '')})"
        elif spec.get("healthcheck", {}).get("test") and health != "healthy":
            found[name] = f"health {health or 'unknown'} ({container.get('Status', '')})"
        elif name in READINESS_PATHS:
            for port in spec.get("ports", []):
                if port.get("published"):
                    host = port.get("host_ip") or "127.0.0.1"
                    host = "127.0.0.1" if host == "0.0.0.0" else host
                    first = host_ports(port["published"])[0]  # of a replicated service's range
                    url = f"http://{host}:{first}{READINESS_PATHS[name]}"
                    ready, said = probe(url)
                    if not ready:
                        found[name] = said
    return found


def wait_until_ready(stack: Stack, timeout: float, poll: float = 2.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        found = problems(stack)
        if not found or time.monotonic() >= deadline:
            return found
        pause.wait(poll)


def report(stack: Stack, found: dict[str, str]) -> None:
    for name, why in found.items():
        print(f"✗ {name} is not ready: {why}")
        if name == "compose":
            continue
        logs = stack.run("logs", "--no-color", "--tail", str(LOG_LINES), name)
        lines = (logs.stdout + logs.stderr).strip().splitlines()
        if lines:
            print(f"  last {len(lines)} lines of its log:")
            print("\n".join(f"    {line}" for line in lines))
