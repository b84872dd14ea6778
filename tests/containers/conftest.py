"""The container tier's machinery: this machine's podman, the image, the supported route.

Nothing here changes the Dockerfile or the compose files, and nothing stands in for what a
podman host runs: the stack is started by `make up-sim ENGINE=podman`, the route
docs/deployment.md#podman describes (`python -m ops podman`: podman's API socket, the image
build, healthchecks without systemd). What the tier keeps is only what a real host would not
need: podman-host.sh's stand-in base images (no registry here) and compose.podman.yaml (no
Grafana image here).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ops import podman as route
from tests.support import REPO_ROOT, wait_until

from .helpers import Engine, Podman

HERE = Path(__file__).resolve().parent
IMAGE = "localhost/leave-copilot-bundle:0.1.0"  # BUNDLE_IMAGE in deploy/.env.example


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
    """The bundle's image, built from docker/Dockerfile unchanged, as `make up-sim
    ENGINE=podman` builds it (only when its build context changed since the last build)."""
    started = time.monotonic()
    build = route.Build(IMAGE, REPO_ROOT, REPO_ROOT / "docker" / "Dockerfile")
    try:
        route.build_if_changed(build, podman.env)
    except route.ComposeError as error:
        pytest.fail(f"the image build failed: {error}")
    podman.timings["image build"] = time.monotonic() - started
    size = podman.run("image", "inspect", IMAGE, "--format", "{{.Size}}").stdout.strip()
    podman.timings["image size MB"] = int(size) / 1e6
    return IMAGE


@pytest.fixture(scope="session")
def engine(podman: Podman, image: str) -> Iterator[Engine]:
    """`make … ENGINE=podman` in this machine's podman settings; everything it starts (the API
    service, the healthcheck ticker) is stopped at the end as a user stops it."""
    env = {**podman.env, "ENGINE": "podman"}
    try:
        yield Engine(podman, env)
    finally:
        ticker = route._pid_alive(route.TICKER_PID)
        subprocess.run(
            [sys.executable, "-m", "ops", "podman", "stop"], cwd=REPO_ROOT, env=env, check=False
        )
        if ticker is not None:
            wait_until(lambda: not Path(f"/proc/{ticker}").exists(), timeout=10,
                       what="the healthcheck ticker to end with the tier")  # fmt: skip


@pytest.fixture(scope="session")
def timings(podman: Podman) -> Iterator[dict[str, float]]:
    yield podman.timings
    print("\ncontainer tier timings:")
    for what, value in podman.timings.items():
        print(f"  {what:<28} {value:8.1f}")
