"""The load generator's image (docker/Dockerfile.loadtest): hadolint, and its Python
environment made without containers as its builder stage makes it, then the master's and a
worker's entry points started from its /app (the loadtest/, ops/ and devtools/ it copies,
nothing else)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

from .image_install import (
    copied_sources,
    final_sync_flags,
    install_like,
    run_isolated,
)

DOCKERFILE = REPO_ROOT / "docker" / "Dockerfile.loadtest"


def test_reads_the_dockerfile_it_mirrors():
    assert {"pyproject.toml", "uv.lock", "loop", "mcp_server"} <= set(copied_sources(DOCKERFILE))
    assert copied_sources(DOCKERFILE, "runtime") == ["loadtest", "ops", "devtools"]
    flags = final_sync_flags(DOCKERFILE)
    assert {"--frozen", "--no-dev", "--all-extras"} <= set(flags) and "--no-extra" not in flags


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> tuple[Path, Path]:
    """(the image's python, its /app)."""
    context = tmp_path_factory.mktemp("load-image")
    python = install_like(DOCKERFILE, context / "build")
    app = context / "app"
    for source in copied_sources(DOCKERFILE, "runtime"):
        shutil.copytree(
            REPO_ROOT / source, app / source, ignore=shutil.ignore_patterns("__pycache__")
        )
    return python, app


@pytest.mark.parametrize(
    "args",
    [
        ["-m", "loadtest", "--help"],
        ["-m", "loadtest.cost", "--help"],
        # a worker's start: Locust imports the locustfile and lists its users
        ["-m", "locust", "-f", "loadtest/locustfile.py", "--list"],
    ],
    ids=lambda args: " ".join(args[1:3]),
)
def test_the_entry_points_start(image, args):
    python, app = image
    done = run_isolated(python, *args, cwd=app)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "usage:" in done.stdout or "FacadeUser" in done.stdout, done.stdout


def test_the_master_looks_for_the_stack_with_what_the_image_installs(image):
    # the local stack's URLs (devtools/), the probes and the backend's identity: one line when
    # nothing answers, not an ImportError
    python, app = image
    nowhere = ["--loop-url", "http://127.0.0.1:9", "--mcp-url", "http://127.0.0.1:9/mcp"]
    done = run_isolated(python, "-m", "loadtest", *nowhere, cwd=app)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.startswith("load: nothing answers at http://127.0.0.1:9/healthz"), (
        done.stderr[-3000:]
    )


def test_the_master_prepares_a_run_from_the_installed_services(image):
    python, app = image
    script = (
        "import mcp_server, loadtest.prometheus as p\n"
        "from loadtest import conversations\n"
        "assert 'site-packages' in mcp_server.__file__, mcp_server.__file__\n"
        "print(len(conversations.build()['tools']))\n"
        "print(p.resolve('')[0])\n"  # looks for make dev's Prometheus: devtools/ and its imports
    )
    done = run_isolated(python, "-c", script, cwd=app)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["5", "None"]
    assert run_isolated(python, "-c", "import mypy", cwd=app).returncode != 0  # not shipped
