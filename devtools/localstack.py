"""The no-Docker stack: our compose services as local processes, from the compose files.

Commands and environment come from `docker compose config` of the simulator layout, so this
runs exactly what the containers would run. Service hostnames become 127.0.0.1, container
ports become host ports, volume paths become folders under the run directory. Logs and pid
files live there too; `stop` ends exactly the processes that `up` started.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ops import compose

RUN_DIR = compose.REPO_ROOT / ".run"
# Where the running stack's services listen ({name: base URL}), for `make load` and the rest
# that come to it afterwards: the ports move with LOOP_PUBLISHED_PORT, LOCAL_MODEL_PORT …
URLS_FILE = "urls.json"
ONE_SHOT = {"mcp-seed"}
ROUTER = "vllm-router"
# Where each job of monitoring/prometheus/prometheus.yml finds a service's metrics: the job
# and the container port, when it is not the service's own port under its own name.
METRICS = {ROUTER: ("vllm-router", 29000)}
_HEALTH_URL = re.compile(r"http://127\.0\.0\.1:(\d+)(/[\w/.-]*)")
_REPLICA = re.compile(r"vllm-\d+")


@dataclass
class LocalService:
    name: str
    command: list[str]
    environment: dict[str, str]
    container_port: int | None
    host_port: int | None
    health_path: str | None
    metrics: dict[str, int] = field(default_factory=dict)  # Prometheus job → local port

    @property
    def url(self) -> str | None:
        return f"http://127.0.0.1:{self.host_port}" if self.host_port else None

    @property
    def health_url(self) -> str | None:
        return f"{self.url}{self.health_path}" if self.url and self.health_path else None


def start_order(services: Mapping[str, Any]) -> list[str]:
    """Our services, in start order: the one-shot first, then each before what depends on it
    (the replicas, the router in front of them, the MCP server, the loop). Third-party images
    (Prometheus, Grafana, PostgreSQL, DCGM) are not run locally."""
    replicas = sorted((n for n in services if _REPLICA.fullmatch(n)), key=lambda n: int(n[5:]))
    return [*ONE_SHOT, *replicas, ROUTER, "mcp-server", "loop"]


def plan(
    project: dict[str, Any], run_dir: Path, local_model_port: int | None = None
) -> list[LocalService]:
    """Turn the resolved compose project into local process specs. The model endpoint the
    loop and the load generator use (the router) keeps its container port, or
    `local_model_port`; the replicas behind it, not reached from outside, get free ports."""
    services = project["services"]
    order = start_order(services)
    ports: dict[str, tuple[int, int]] = {}  # service -> (container port, host port)
    for name in order:
        spec = services[name]
        container = _container_port(spec)
        if container is None:
            continue
        published = [
            compose.host_ports(p["published"])[0]
            for p in spec.get("ports", [])
            if p.get("published")
        ]
        if published:
            ports[name] = (container, published[0])
        elif name == ROUTER:
            ports[name] = (container, local_model_port or container)
        else:
            ports[name] = (container, _free_port())

    planned = []
    for name in order:
        spec = services[name]
        volumes = {
            v["target"]: run_dir / "volumes" / (v.get("source") or name)
            for v in spec.get("volumes", [])
            if v.get("type") == "volume"
        }
        environment = {
            key: _localise(str(value), ports, volumes)
            for key, value in (spec.get("environment") or {}).items()
            if value is not None
        }
        container, host = ports.get(name, (None, None))
        for key, value in environment.items():  # the service's own listening port
            if key.endswith("_PORT") and container and value == str(container):
                environment[key] = str(host)
        metrics: dict[str, int] = {}
        own_port = {str(container): str(host)} if container and host else {}
        if name in METRICS:
            job, port = METRICS[name]
            metrics[job] = _free_port()
            own_port[str(port)] = str(metrics[job])
        elif host is not None:
            metrics["vllm" if _REPLICA.fullmatch(name) else name] = host
        command = [_localise_argument(a, ports, volumes, own_port) for a in spec["command"]]
        if command and command[0] == "python":
            command[0] = sys.executable
        elif command and (Path(sys.executable).parent / command[0]).is_file():
            command[0] = str(Path(sys.executable).parent / command[0])  # e.g. vllm-router
        planned.append(
            LocalService(name, command, environment, container, host, _health_path(spec), metrics)
        )
    return planned


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _localise_argument(
    argument: str,
    ports: Mapping[str, tuple[int, int]],
    volumes: Mapping[str, Path],
    own_port: Mapping[str, str],
) -> str:
    """A command argument as a local process takes it: `--port=8000` the service's own host
    port, `--host=0.0.0.0` loopback, other services' `name:port` their local addresses."""
    flag, equals, value = argument.partition("=")
    if equals and flag.startswith("--") and flag.endswith("port") and value in own_port:
        return f"{flag}={own_port[value]}"
    if equals and flag.startswith("--"):
        return f"{flag}={_localise(value, ports, volumes)}"
    return _localise(argument, ports, volumes)


def _container_port(spec: dict[str, Any]) -> int | None:
    match = _HEALTH_URL.search(" ".join(spec.get("healthcheck", {}).get("test", []) or []))
    return int(match.group(1)) if match else None


def _health_path(spec: dict[str, Any]) -> str | None:
    match = _HEALTH_URL.search(" ".join(spec.get("healthcheck", {}).get("test", []) or []))
    return match.group(2) if match else None


def _localise(value: str, ports: Mapping[str, tuple[int, int]], volumes: Mapping[str, Path]) -> str:
    if value == "0.0.0.0":
        return "127.0.0.1"
    for service, (container, host) in ports.items():
        value = value.replace(f"{service}:{container}", f"127.0.0.1:{host}")
    for target, local in volumes.items():
        local.mkdir(parents=True, exist_ok=True)
        value = value.replace(f"{target}/", f"{local.resolve()}/")
    return value


class LocalStack:
    def __init__(self, run_dir: Path = RUN_DIR) -> None:
        self.run_dir = run_dir
        self.logs = run_dir / "logs"
        self.pids = run_dir / "pids"

    def up(
        self,
        services: list[LocalService],
        *,
        timeout: float = 60.0,
        reset: bool = False,
    ) -> None:
        if self.running():
            raise RuntimeError(
                f"a local stack is already running ({', '.join(self.running())}): make stop"
            )
        if reset:
            for volume in (self.run_dir / "volumes").glob("*"):
                for file in volume.glob("*"):
                    file.unlink()
        self.logs.mkdir(parents=True, exist_ok=True)
        self.pids.mkdir(parents=True, exist_ok=True)
        for service in services:
            self._check_port_free(service)
            if service.name in ONE_SHOT:
                self._run_once(service)
                continue
            process = self._spawn(service)
            self._wait_ready(service, process, timeout)
            self._record_title(service, process)
        urls = {s.name: s.url for s in services if s.url and s.name not in ONE_SHOT}
        (self.run_dir / URLS_FILE).write_text(json.dumps(urls, indent=1) + "\n")

    def urls(self) -> dict[str, str]:
        """The base URL of each service of this stack that is running now ({} if none is)."""
        running = set(self.running())
        try:
            urls = json.loads((self.run_dir / URLS_FILE).read_text())
        except (OSError, ValueError):
            return {}
        return {name: url for name, url in urls.items() if name in running}

    def _run_once(self, service: LocalService) -> None:
        log = self.logs / f"{service.name}.log"
        with log.open("wb") as out:
            done = subprocess.run(
                service.command,
                env=self._env(service),
                cwd=compose.REPO_ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=120,
            )
        if done.returncode != 0:
            raise RuntimeError(f"{service.name} failed ({done.returncode}); see {log}")

    def _spawn(self, service: LocalService) -> subprocess.Popen[bytes]:
        log = (self.logs / f"{service.name}.log").open("ab")
        process = subprocess.Popen(
            service.command,
            env=self._env(service),
            cwd=compose.REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives `make dev`; `make stop` ends it
        )
        log.close()
        (self.pids / f"{service.name}.pid").write_text(
            f"{process.pid}\n{' '.join(service.command)}\n"
        )
        return process

    def _record_title(self, service: LocalService, process: subprocess.Popen[bytes]) -> None:
        """The process as /proc shows it once ready: a program that retitles itself (the
        router calls itself vllm::router) is then still recognised as ours by `stop`."""
        try:
            shown = Path(f"/proc/{process.pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            return
        (self.pids / f"{service.name}.pid").write_text(f"{process.pid}\n{shown.decode()}\n")

    @staticmethod
    def _env(service: LocalService) -> dict[str, str]:
        return {**os.environ, **service.environment, "PYTHONUNBUFFERED": "1"}

    def _wait_ready(
        self, service: LocalService, process: subprocess.Popen[bytes], timeout: float
    ) -> None:
        url = service.health_url
        if url is None:
            return
        deadline = time.monotonic() + timeout
        pause = threading.Event()
        interval = 0.05
        while time.monotonic() < deadline:
            if process.poll() is not None:
                log = (self.logs / f"{service.name}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{service.name} exited ({process.returncode}):\n{log}")
            try:
                if httpx.get(url, timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            pause.wait(interval)  # poll readiness with backoff
            interval = min(interval * 1.5, 0.5)
        raise TimeoutError(f"{service.name} not ready at {url} after {timeout:.0f}s")

    @staticmethod
    def _check_port_free(service: LocalService) -> None:
        if service.url is None or service.name in ONE_SHOT:
            return
        try:
            httpx.get(service.url, timeout=0.5)
        except httpx.ConnectError:
            return
        except httpx.HTTPError:
            pass
        raise RuntimeError(f"port {service.host_port} for {service.name} is already in use")

    def running(self) -> list[str]:
        names = []
        for pid_file in sorted(self.pids.glob("*.pid")) if self.pids.exists() else []:
            pid = self._pid(pid_file)
            if pid is not None:
                names.append(pid_file.stem)
        return names

    def stop(self) -> list[str]:
        (self.run_dir / URLS_FILE).unlink(missing_ok=True)
        stopped = []
        for pid_file in sorted(self.pids.glob("*.pid")) if self.pids.exists() else []:
            pid = self._pid(pid_file)
            if pid is not None:
                os.kill(pid, signal.SIGTERM)
                if not self._wait_exit(pid, 10):
                    os.kill(pid, signal.SIGKILL)
                stopped.append(pid_file.stem)
            pid_file.unlink()
        return stopped

    @staticmethod
    def _pid(pid_file: Path) -> int | None:
        """The pid in the file if that process is still the one we started."""
        lines = pid_file.read_text().splitlines()
        try:
            pid = int(lines[0])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (ValueError, IndexError, OSError):
            return None
        return pid if len(lines) > 1 and cmdline.strip() == lines[1].strip() else None

    @staticmethod
    def _wait_exit(pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        pause = threading.Event()
        while time.monotonic() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:  # our own child: reap it
                    return True
            except ChildProcessError:  # started by an earlier `make dev`: not ours to reap
                pass
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            pause.wait(0.05)
        return False
