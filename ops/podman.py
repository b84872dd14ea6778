"""The podman route: `make up|up-sim|down|logs|ps|load-compose ENGINE=podman`.

`python -m ops podman compose <docker compose arguments>` stands where `docker compose`
stands on a Docker host. It runs the Compose v2 binary (ops.compose.compose_binary()) against
podman's Docker-compatible API: an API socket that answers already (/run/podman/podman.sock,
$XDG_RUNTIME_DIR/podman/podman.sock), else one it starts itself, detached
(`podman system service --time=0`, socket and pid file in .run/podman/). No `docker` is needed.

Three things differ from Docker, and `up` and `down` handle them here:

- Healthchecks: podman runs them from systemd timers. Without systemd (containers, minimal VMs)
  they never fire and `depends_on: service_healthy` waits forever, so `up` starts a detached
  ticker (`python -m ops podman tick`) that runs `podman healthcheck run` for the project's
  containers every few seconds; `down` stops it. With systemd, none is started.
- Builds: Compose builds through Bake/BuildKit, which podman lacks (COMPOSE_BAKE=false is
  deprecated). `up` builds each image itself with `podman build --format docker` (the OCI format
  has no HEALTHCHECK), keyed on a digest of the build context (the Dockerfile and the sources
  its COPY/ADD lines name) stored as an image label: no rebuild, so the same image ID, when the
  digest is the same; `--no-cache` when it differs (buildah 1.28 reuses a cached COPY layer
  although the copied files changed). Compose then runs without `--build`.
- Recreating: podman's API reports a container's NetworkSettings.Networks.<n>.NetworkID as the
  network's name, not its ID, so Compose thinks every container is on the wrong network and
  recreates all of them on each `up`. `up` runs Compose with `--no-recreate` (creates what is
  missing, starts what is stopped) and then force-recreates only the services whose
  `com.docker.compose.config-hash` differs from `compose config --hash` or whose image changed.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .compose import REPO_ROOT, ComposeError, compose_binary

RUN_DIR = REPO_ROOT / ".run" / "podman"
OWN_SOCKET = RUN_DIR / "podman.sock"
SERVICE_PID = RUN_DIR / "service.pid"
TICKER_PID = RUN_DIR / "ticker.pid"
TICK_SECONDS = 2.0
DIGEST_LABEL = "io.leave-copilot.build-context-digest"
CONFIG_HASH_LABEL = "com.docker.compose.config-hash"
IMAGE_LABEL = "com.docker.compose.image"
SERVICE_LABEL = "com.docker.compose.service"
PROJECT_LABEL = "com.docker.compose.project"

# Compose's global options that take a value (the first other word is the command).
GLOBAL_VALUE_OPTIONS = {
    "-f",
    "--file",
    "-p",
    "--project-name",
    "--project-directory",
    "--env-file",
    "--profile",
    "--ansi",
    "--progress",
    "--parallel",
}
# `up` options that take a value (the other words are service names).
UP_VALUE_OPTIONS = {
    "--wait-timeout",
    "--scale",
    "-t",
    "--timeout",
    "--pull",
    "--exit-code-from",
    "--attach",
    "--no-attach",
    "--attach-dependencies",
}


# --- the API socket -----------------------------------------------------------------------


def _answers(socket_path: Path) -> bool:
    """GET /version over the socket answers 200."""
    import socket

    try:
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(2)
            client.connect(str(socket_path))
            client.sendall(b"GET /version HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n")
            return client.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def existing_sockets(environ: Mapping[str, str]) -> list[Path]:
    """API sockets a podman host may already serve: the systemd podman.socket ones."""
    found = [Path("/run/podman/podman.sock")]
    runtime = environ.get("XDG_RUNTIME_DIR")
    if runtime:
        found.append(Path(runtime) / "podman" / "podman.sock")
    return found


def _pid_alive(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def api_socket(environ: Mapping[str, str]) -> Path:
    """An answering API socket: the host's own, else this checkout's (started if need be)."""
    for candidate in [*existing_sockets(environ), OWN_SOCKET]:
        if _answers(candidate):
            return candidate
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    OWN_SOCKET.unlink(missing_ok=True)
    service = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{OWN_SOCKET}"],
        env=dict(environ),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(RUN_DIR / "service.log", "ab"),  # noqa: SIM115  # the child keeps it
        start_new_session=True,  # outlives this command, as a daemon would
    )
    SERVICE_PID.write_text(f"{service.pid}\n")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if service.poll() is not None:
            raise ComposeError(
                f"podman system service exited ({service.returncode}): see {RUN_DIR}/service.log"
            )
        if _answers(OWN_SOCKET):
            return OWN_SOCKET
        time.sleep(0.2)
    raise ComposeError(f"podman's API did not answer on {OWN_SOCKET} within 30 s")


def engine_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for the Compose binary: DOCKER_HOST at podman's API socket."""
    env = dict(os.environ if environ is None else environ)
    env["DOCKER_HOST"] = f"unix://{api_socket(env)}"
    env.pop("COMPOSE_BAKE", None)
    return env


def _stop(pid_file: Path) -> bool:
    pid = _pid_alive(pid_file)
    pid_file.unlink(missing_ok=True)
    if pid is None:
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except OSError:
        os.kill(pid, signal.SIGTERM)
    return True


# --- healthchecks without systemd ---------------------------------------------------------


def systemd_runs() -> bool:
    """Podman's healthcheck timers need systemd as the init system."""
    return Path("/run/systemd/system").is_dir()


def start_ticker(project: str, environ: Mapping[str, str]) -> bool:
    """Start the detached healthcheck ticker unless systemd runs or one is running already."""
    if systemd_runs() or _pid_alive(TICKER_PID) is not None:
        return False
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    ticker = subprocess.Popen(
        [sys.executable, "-m", "ops", "podman", "tick", "--project", project],
        cwd=REPO_ROOT,
        env=dict(environ),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    TICKER_PID.write_text(f"{ticker.pid}\n")
    return True


def tick(project: str, seconds: float = TICK_SECONDS) -> None:
    """Run the healthchecks of the project's running containers, every `seconds`, forever."""
    while True:
        listed = subprocess.run(
            ["podman", "ps", "-q", "--filter", f"label={PROJECT_LABEL}={project}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        for container in listed.stdout.split():
            with contextlib.suppress(subprocess.TimeoutExpired):
                subprocess.run(
                    ["podman", "healthcheck", "run", container],
                    capture_output=True,
                    timeout=30,
                )
        time.sleep(seconds)


# --- the build ----------------------------------------------------------------------------


def _logical_lines(dockerfile: str) -> list[str]:
    lines, current = [], ""
    for raw in dockerfile.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    if current:
        lines.append(current)
    return lines


def copied_sources(dockerfile: str) -> list[str]:
    """The build-context paths the Dockerfile's COPY/ADD lines name (not `--from=` stages)."""
    sources: list[str] = []
    for line in _logical_lines(dockerfile):
        instruction, _, rest = line.partition(" ")
        if instruction.upper() not in ("COPY", "ADD"):
            continue
        rest = rest.strip()
        flags = []
        while rest.startswith("--"):
            flag, _, rest = rest.partition(" ")
            flags.append(flag)
            rest = rest.strip()
        if any(flag.startswith("--from") for flag in flags):
            continue
        paths = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
        sources += paths[:-1]  # the last is the destination
    return sources


def _ignore_patterns(context: Path) -> list[str]:
    ignore = context / ".dockerignore"
    if not ignore.is_file():
        return []
    lines = (line.strip() for line in ignore.read_text().splitlines())
    return [line.rstrip("/") for line in lines if line and not line.startswith(("#", "!"))]


def _ignored(relative: str, patterns: Sequence[str]) -> bool:
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        bare = pattern.removeprefix("**/")
        for prefix in prefixes:
            if fnmatch.fnmatchcase(prefix, pattern):
                return True
            if pattern.startswith("**/") and fnmatch.fnmatchcase(prefix.rsplit("/", 1)[-1], bare):
                return True
    return False


def context_digest(context: Path, dockerfile: Path) -> str:
    """sha256 over the Dockerfile and every file its COPY/ADD lines take from the context
    (less what .dockerignore leaves out): it changes exactly when the image's inputs do."""
    text = dockerfile.read_text()
    patterns = _ignore_patterns(context)
    digest = hashlib.sha256()
    digest.update(b"Dockerfile\0" + text.encode() + b"\0")
    files: set[Path] = set()
    for source in copied_sources(text):
        for match in (
            sorted(context.glob(source)) if any(c in source for c in "*?[") else [context / source]
        ):
            if match.is_dir():
                files.update(p for p in match.rglob("*") if p.is_file())
            elif match.is_file():
                files.add(match)
    for path in sorted(files):
        relative = path.relative_to(context).as_posix()
        if _ignored(relative, patterns):
            continue
        digest.update(relative.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class Build:
    image: str
    context: Path
    dockerfile: Path


def builds(project: Mapping[str, Any], services: Iterable[str] = ()) -> list[Build]:
    """The images the project builds (of the named services, or all), one entry each."""
    wanted = set(services)
    found: dict[str, Build] = {}
    for name, service in project["services"].items():
        if (wanted and name not in wanted) or "build" not in service:
            continue
        context = Path(service["build"]["context"])
        dockerfile = context / service["build"].get("dockerfile", "Dockerfile")
        image = service.get("image") or f"{project['name']}-{name}"
        found.setdefault(image, Build(image, context, dockerfile))
    return list(found.values())


def _podman(*args: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, env=dict(env))


def build_if_changed(build: Build, env: Mapping[str, str]) -> bool:
    """Build the image unless its digest label says it was built from this context."""
    digest = context_digest(build.context, build.dockerfile)
    template = '{{index .Labels "' + DIGEST_LABEL + '"}}'
    present = _podman("image", "inspect", "--format", template, build.image, env=env)
    if present.returncode == 0 and present.stdout.strip() == digest:
        print(f"image {build.image}: up to date (build context {digest[:12]})", file=sys.stderr)
        return False
    print(f"image {build.image}: building (build context {digest[:12]})", file=sys.stderr)
    done = subprocess.run(
        [
            "podman",
            "build",
            "--format",
            "docker",
            "--no-cache",
            "--label",
            f"{DIGEST_LABEL}={digest}",
            "-f",
            str(build.dockerfile),
            "-t",
            build.image,
            str(build.context),
        ],
        env=dict(env),
    )
    if done.returncode != 0:
        raise ComposeError(f"podman build of {build.image} failed ({done.returncode})")
    return True


# --- what changed -------------------------------------------------------------------------


def parse_config_hashes(text: str) -> dict[str, str]:
    """`compose config --hash '*'` prints `<service> <hash>` per line."""
    hashes = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            hashes[parts[0]] = parts[1]
    return hashes


def changed_services(
    containers: Iterable[Mapping[str, Any]],
    config_hashes: Mapping[str, str],
    image_ids: Mapping[str, str],
) -> list[str]:
    """The services with a container whose config hash or image differs from the project's.

    `containers`: `podman ps -a --format json` entries (their Labels); `image_ids`: each
    service's image ID now ("sha256:…"), for the services whose image is known locally.
    """
    changed: set[str] = set()
    for container in containers:
        labels = container.get("Labels") or {}
        service = str(labels.get(SERVICE_LABEL, ""))
        if service not in config_hashes:
            continue
        if labels.get(CONFIG_HASH_LABEL) != config_hashes[service]:
            changed.add(service)
            continue
        current = image_ids.get(service)
        if current and _bare(labels.get(IMAGE_LABEL, "")) != _bare(current):
            changed.add(service)
    return sorted(changed)


def _bare(image_id: str) -> str:
    return image_id.removeprefix("sha256:")


# --- the compose entry --------------------------------------------------------------------


def split_command(args: Sequence[str]) -> tuple[list[str], str | None, list[str]]:
    """(global options, the command, its arguments) of a `docker compose` argument list."""
    index = 0
    while index < len(args):
        word = args[index]
        if word in GLOBAL_VALUE_OPTIONS:
            index += 2
        elif word.startswith("-"):
            index += 1
        else:
            return list(args[:index]), word, list(args[index + 1 :])
    return list(args), None, []


def split_up(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(options, service names) of `up`'s arguments."""
    options: list[str] = []
    services: list[str] = []
    index = 0
    while index < len(args):
        word = args[index]
        if word in UP_VALUE_OPTIONS:
            options += args[index : index + 2]
            index += 2
            continue
        (options if word.startswith("-") else services).append(word)
        index += 1
    return options, services


class Compose:
    def __init__(self, global_options: Sequence[str], env: Mapping[str, str]) -> None:
        self.global_options, self.env = list(global_options), dict(env)

    def command(self, *args: str) -> list[str]:
        return [compose_binary(), *self.global_options, *args]

    def call(self, *args: str) -> int:
        return subprocess.run(self.command(*args), env=self.env).returncode

    def output(self, *args: str) -> str:
        done = subprocess.run(self.command(*args), capture_output=True, text=True, env=self.env)
        if done.returncode != 0:
            raise ComposeError(done.stderr.strip() or f"compose {args[0]} failed")
        return done.stdout


def up(compose: Compose, up_args: Sequence[str]) -> int:
    options, services = split_up(up_args)
    options = [o for o in options if o != "--build"]
    project = json.loads(compose.output("config", "--format", "json"))
    for build in builds(project, services):
        build_if_changed(build, compose.env)
    if start_ticker(project["name"], compose.env):
        print("healthchecks: no systemd here, a ticker runs them (.run/podman/)", file=sys.stderr)
    if "--force-recreate" in options or "--no-recreate" in options:
        return compose.call("up", *options, *services)
    status = compose.call("up", *options, "--no-recreate", *services)
    if status != 0:
        return status
    hashes = parse_config_hashes(compose.output("config", "--hash", "*"))
    if services:
        hashes = {name: value for name, value in hashes.items() if name in services}
    listed = _podman(
        "ps",
        "-a",
        "--format",
        "json",
        "--filter",
        f"label={PROJECT_LABEL}={project['name']}",
        env=compose.env,
    )
    containers = json.loads(listed.stdout or "[]") if listed.returncode == 0 else []
    image_ids = {}
    for name in hashes:
        image = project["services"].get(name, {}).get("image")
        if image:
            found = _podman("image", "inspect", "--format", "{{.Id}}", image, env=compose.env)
            if found.returncode == 0:
                image_ids[name] = found.stdout.strip()
    changed = changed_services(containers, hashes, image_ids)
    if not changed:
        return 0
    print(f"recreating what changed: {', '.join(changed)}", file=sys.stderr)
    options = [o for o in options if o not in ("--no-deps",)]
    return compose.call("up", *options, "--force-recreate", "--no-deps", *changed)


def compose_main(args: Sequence[str]) -> int:
    global_options, command, rest = split_command(args)
    env = engine_env()
    compose = Compose(global_options, env)
    if command == "up":
        return up(compose, rest)
    status = compose.call(*args)
    if command == "down":
        _stop(TICKER_PID)
    return status


def stop() -> list[str]:
    """Stop the ticker and the API service this checkout started (not a host's own)."""
    stopped = []
    if _stop(TICKER_PID):
        stopped.append("healthcheck ticker")
    if _stop(SERVICE_PID):
        stopped.append("podman API service")
    return stopped


USAGE = """usage: python -m ops podman compose <docker compose arguments>
       python -m ops podman env        print DOCKER_HOST for podman's API socket
       python -m ops podman tick [--project NAME]   run healthchecks every 2 s (foreground)
       python -m ops podman stop       stop the ticker and the API service started here"""


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], list(argv[1:])
    try:
        if command == "compose":
            return compose_main(rest)
        if command == "env":
            print(f"DOCKER_HOST={engine_env()['DOCKER_HOST']}")
            return 0
        if command == "tick":
            project = rest[1] if rest[:1] == ["--project"] and len(rest) > 1 else "leave-copilot"
            tick(project)
            return 0
        if command == "stop":
            stopped = stop()
            print(f"stopped: {', '.join(stopped)}" if stopped else "nothing of podman's to stop")
            return 0
    except ComposeError as error:
        print(f"✗ {error}", file=sys.stderr)
        return 2
    print(USAGE, file=sys.stderr)
    return 2
