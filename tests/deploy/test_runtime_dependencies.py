"""Every service imports and starts from an install made exactly as the image makes it.

`make test` runs with the dev dependencies, which hid a runtime import of a dev-only package
(`python -m loop` crashed in the image). This builds the image's environment without
containers: the files the Dockerfile copies, its `uv sync` flags, then every module and entry
point from outside the source tree.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .image_install import DOCKERFILE, copied_sources, final_sync_flags, install_like, run_isolated

ENTRY_POINTS = [
    ["loop", "--help"],
    ["loop", "export", "--help"],
    ["loop.cli", "--help"],
    ["mcp_server", "--help"],
    ["mcp_server", "seed", "--help"],
    ["modelsim", "--help"],
    ["common.healthprobe", "--help"],
    ["vllm_router.launch_router", "--help"],  # the router compose runs from this image
]


def test_reads_the_dockerfile_it_mirrors():
    assert {"pyproject.toml", "uv.lock", "loop", "mcp_server"} <= set(copied_sources())
    assert {"--frozen", "--no-dev"} <= set(final_sync_flags())


@pytest.fixture(scope="module")
def image_python(tmp_path_factory) -> Path:
    return install_like(DOCKERFILE, tmp_path_factory.mktemp("image-context"))


def test_the_install_holds_no_dev_dependency(image_python):
    missing = run_isolated(image_python, "-c", "import pytest")
    assert missing.returncode != 0  # proves the check below can fail


def test_every_module_imports(image_python):
    script = (
        "import importlib, pkgutil\n"
        "for package in ('common', 'mcp_server', 'modelsim', 'loop'):\n"
        "    module = importlib.import_module(package)\n"
        "    assert 'site-packages' in module.__file__, module.__file__\n"
        "    for info in pkgutil.walk_packages(module.__path__, package + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "        print(info.name)\n"
    )
    done = run_isolated(image_python, "-c", script)
    assert done.returncode == 0, done.stderr
    imported = done.stdout.split()
    assert "loop.app" in imported and "loop.api.runs" in imported  # subpackages too


def test_the_chat_pages_files_are_installed_with_the_loop(image_python):
    script = (
        "from loop.api.chat_page import ASSETS, PAGE\n"
        "missing = [n for n in (*ASSETS, 'index.html') if not (PAGE / n).is_file()]\n"
        "print(PAGE, missing)\n"
    )
    done = run_isolated(image_python, "-c", script)
    assert done.returncode == 0, done.stderr
    assert "site-packages" in done.stdout and done.stdout.strip().endswith("[]"), done.stdout


@pytest.mark.parametrize("entry_point", ENTRY_POINTS, ids=" ".join)
def test_every_entry_point_starts(image_python, entry_point):
    done = run_isolated(image_python, "-m", *entry_point)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout or "python -m common.healthprobe" in done.stdout


def test_the_router_binary_is_the_pinned_one_and_takes_the_flags_compose_gives_it(image_python):
    from ops.compose import config

    command = config(sim=True)["services"]["vllm-router"]["command"]
    router = image_python.parent / command[0]
    done = run_isolated(router, "--help")
    assert done.returncode == 0, done.stderr
    flags = {a.partition("=")[0] for a in command if a.startswith("--")}
    offered = set(re.findall(r"(--[a-z][a-z0-9-]*)", done.stdout))
    assert flags <= offered, flags - offered
    version = run_isolated(
        image_python, "-c", "import vllm_router.version as v; print(v.__version__)"
    )
    assert version.stdout.strip() == "0.1.17", version


def test_a_postgresql_url_finds_its_driver_in_the_image(image_python):
    # The services take `postgresql://` URLs (docs/configuration.md): SQLAlchemy's default
    # PostgreSQL driver, psycopg 3, with its bundled libpq (the slim image has no libpq).
    script = (
        "import psycopg, sqlalchemy\n"
        "engine = sqlalchemy.create_engine('postgresql://leave@localhost/leave')\n"
        "print(engine.dialect.driver, psycopg.pq.__impl__)\n"
    )
    done = run_isolated(image_python, "-c", script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["psycopg", "binary"]


def test_the_api_pages_files_are_in_the_image(image_python):
    # /docs and /redoc load them from the loop, not from a CDN (an air-gapped host has none)
    script = (
        "from loop.api.docs import ASSETS, ASSET_FILES\n"
        "for name in sorted(ASSET_FILES):\n"
        "    print(name, (ASSETS / name).stat().st_size)\n"
    )
    done = run_isolated(image_python, "-c", script)
    assert done.returncode == 0, done.stderr
    sizes = dict(line.split() for line in done.stdout.splitlines())
    assert set(sizes) == {
        "swagger-ui-bundle.js",
        "swagger-ui.css",
        "redoc.standalone.js",
        "favicon.png",
    }
    assert int(sizes["swagger-ui-bundle.js"]) > 1_000_000, sizes
