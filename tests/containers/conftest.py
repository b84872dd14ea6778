"""The container tier's machinery: podman in place of a Docker engine, the image, the API service.

Nothing here changes the Dockerfile or the compose files: the image is built from
docker/Dockerfile as it is, and the stack is started by `make up-sim` with a `docker` on PATH
whose `compose` is the real Compose v2 binary talking to podman's Docker-compatible API.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stack.compose import compose_binary
from tests.support import REPO_ROOT, wait_until

from .helpers import PROJECT, Engine, Podman

HERE = Path(__file__).resolve().parent
IMAGE = "localhost/leave-copilot-bundle:0.1.0"  # BUNDLE_IMAGE in deploy/.env.example
HEALTH_TICK_SECONDS = 2.0


def _root_or_skip() -> None:
    if os.geteuid() != 0:
        pytest.skip("the container tier needs root (rootful podman)")


@pytest.fixture(scope="session")
def podman() -> Podman:
    """Packages, podman settings and the two stand-in base images (cached between runs)."""
    _root_or_skip()
    started = time.monotonic()
    done = subprocess.run(
        ["bash", str(HERE / "podman-host.sh")], capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0:
        pytest.fail(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed")
    settings = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    env = {**os.environ, **settings}
    timings = {"machine and base images": time.monotonic() - started}
    return Podman(env, timings)


@pytest.fixture(scope="session")
def image(podman: Podman) -> str:
    """The bundle's image, built from docker/Dockerfile unchanged."""
    started = time.monotonic()
    # buildah 1.28 (Debian 12) reuses a cached COPY layer although the copied files changed,
    # which would test an old tree: drop the previous build and its layers first, so the only
    # cache left is this build's own (which compose's build then reuses).
    podman.run("rmi", "--force", IMAGE, check=False)
    podman.run("image", "prune", "--force", check=False)
    # --format docker keeps the HEALTHCHECK (the OCI format has no such field).
    done = subprocess.run(
        ["podman", "build", "--format", "docker", "-f", "docker/Dockerfile", "-t", IMAGE, "."],
        cwd=REPO_ROOT,
        env=podman.env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        pytest.fail(f"the image build failed:\n{tail}")
    podman.timings["image build"] = time.monotonic() - started
    size = podman.run("image", "inspect", IMAGE, "--format", "{{.Size}}").stdout.strip()
    podman.timings["image size MB"] = int(size) / 1e6
    return IMAGE


def _tick_healthchecks(podman: Podman, stop: threading.Event) -> None:
    # Podman runs healthchecks from systemd timers; without systemd they never fire and
    # `depends_on: service_healthy` would wait forever. This stands in for the timers.
    while not stop.is_set():
        ids = podman.run(
            "ps", "-q", "--filter", f"label=com.docker.compose.project={PROJECT}", check=False
        ).stdout.split()
        for container in ids:
            podman.run("healthcheck", "run", container, check=False, timeout=30)
        stop.wait(HEALTH_TICK_SECONDS)


@pytest.fixture(scope="session")
def engine(podman: Podman, image: str, tmp_path_factory) -> Iterator[Engine]:
    socket_path = tmp_path_factory.mktemp("engine") / "podman.sock"
    service = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{socket_path}"],
        env=podman.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    stop = threading.Event()
    ticker = threading.Thread(target=_tick_healthchecks, args=(podman, stop), daemon=True)
    env = {
        **podman.env,
        "PATH": f"{HERE / 'bin'}:{os.environ['PATH']}",
        "COMPOSE_BIN": compose_binary(),
        "DOCKER_HOST": f"unix://{socket_path}",
        # Compose 2.40 builds through Bake/BuildKit, which podman lacks; this selects the
        # classic build API that podman implements.
        "COMPOSE_BAKE": "false",
        "DOCKER_BUILDKIT": "0",
    }
    try:

        def answers() -> bool:
            if service.poll() is not None:
                raise RuntimeError(f"podman system service exited ({service.returncode})")
            return _api_answers(socket_path)

        wait_until(answers, timeout=30, what="podman's Docker-compatible API")
        ticker.start()
        yield Engine(podman, env)
    finally:
        stop.set()
        if ticker.is_alive():
            ticker.join(timeout=60)
        service.terminate()
        try:
            service.wait(timeout=15)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()
        assert not ticker.is_alive(), "the healthcheck ticker outlived the tier"


@pytest.fixture(scope="session")
def timings(podman: Podman) -> Iterator[dict[str, float]]:
    yield podman.timings
    print("\ncontainer tier timings:")
    for what, value in podman.timings.items():
        print(f"  {what:<28} {value:8.1f}")


def _api_answers(socket_path: Path) -> bool:
    """GET /version over the API socket answers 200."""
    try:
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(2)
            client.connect(str(socket_path))
            client.sendall(b"GET /version HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n")
            return client.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False
