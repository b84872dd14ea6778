"""The podman route's pure parts (no podman needed): the build-context digest, which services
changed, how a `docker compose` command line is split, and make's ENGINE switch."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ops import podman
from tests.support import REPO_ROOT

DOCKERFILE = """\
FROM python:3.11 AS builder
COPY --from=ghcr.io/astral-sh/uv:0.13.9 /uv /uvx /bin/
COPY pyproject.toml uv.lock ./
COPY common ./common
ADD --chown=app:app ["app", "/srv/app"]
RUN echo built
FROM python:3.11
COPY --from=builder /app/.venv /app/.venv
"""


@pytest.fixture
def context(tmp_path: Path) -> Path:
    (tmp_path / "Dockerfile").write_text(DOCKERFILE)
    (tmp_path / ".dockerignore").write_text("**/__pycache__\n**/*.pyc\ntests\n")
    for path, text in {
        "pyproject.toml": "[project]\n",
        "uv.lock": "lock\n",
        "common/a.py": "A = 1\n",
        "common/sub/b.py": "B = 2\n",
        "app/main.py": "print()\n",
        "tests/test_a.py": "def test(): pass\n",
        "README.md": "readme\n",
    }.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    return tmp_path


def digest(context: Path) -> str:
    return podman.context_digest(context, context / "Dockerfile")


def test_the_copied_sources_come_from_the_dockerfile_not_from_other_stages():
    assert podman.copied_sources(DOCKERFILE) == ["pyproject.toml", "uv.lock", "common", "app"]


def test_the_bundle_dockerfile_names_the_service_packages():
    sources = podman.copied_sources((REPO_ROOT / "docker" / "Dockerfile").read_text())
    assert {"pyproject.toml", "uv.lock", "common", "mcp_server", "loop"} <= set(sources)
    assert not any("uv:" in source or source.startswith("/") for source in sources)


@pytest.mark.parametrize(
    "path", ["common/a.py", "common/sub/b.py", "app/main.py", "uv.lock", "Dockerfile"]
)
def test_the_digest_changes_when_a_copied_file_changes(context, path):
    before = digest(context)
    (context / path).write_text((context / path).read_text() + "# changed\n")
    assert digest(context) != before


def test_the_digest_changes_when_a_copied_folder_gains_a_file(context):
    before = digest(context)
    (context / "common" / "new.py").write_text("")
    assert digest(context) != before


@pytest.mark.parametrize(
    "path", ["README.md", "tests/test_a.py", "common/__pycache__/a.cpython-311.pyc", "other.txt"]
)
def test_the_digest_stays_when_an_unrelated_or_ignored_file_changes(context, path):
    before = digest(context)
    (context / path).parent.mkdir(parents=True, exist_ok=True)
    (context / path).write_text("changed\n")
    assert digest(context) == before


def test_the_config_hashes_compose_prints_are_parsed():
    printed = "loop 48508d\nmcp-server 97ab28\n\nprometheus 15ec6d\n"
    assert podman.parse_config_hashes(printed) == {
        "loop": "48508d",
        "mcp-server": "97ab28",
        "prometheus": "15ec6d",
    }


def container(service: str, config_hash: str, image: str = "sha256:aaa") -> dict[str, object]:
    return {
        "Labels": {
            podman.SERVICE_LABEL: service,
            podman.CONFIG_HASH_LABEL: config_hash,
            podman.IMAGE_LABEL: image,
        }
    }


def test_only_services_whose_config_or_image_changed_are_recreated():
    containers = [
        container("loop", "h-loop"),
        container("mcp-server", "h-old"),
        container("mcp-seed", "h-seed"),
        container("vllm-0", "h-vllm", image="sha256:old"),
        container("prometheus", "h-prom", image="sha256:prom"),
        container("load-worker", "h-x"),  # not in this project's config: left alone
        {"Labels": {}},  # not a compose container
    ]
    hashes = {
        "loop": "h-loop",
        "mcp-server": "h-new",
        "mcp-seed": "h-seed",
        "vllm-0": "h-vllm",
        "prometheus": "h-prom",
    }
    images = {"loop": "sha256:aaa", "mcp-seed": "aaa", "vllm-0": "sha256:new"}
    assert podman.changed_services(containers, hashes, images) == ["mcp-server", "vllm-0"]


def test_nothing_is_recreated_when_nothing_changed():
    containers = [container("loop", "h1"), container("prometheus", "h2", "sha256:p")]
    hashes = {"loop": "h1", "prometheus": "h2"}
    assert podman.changed_services(containers, hashes, {"loop": "sha256:aaa"}) == []


def test_a_compose_command_line_splits_into_globals_command_and_arguments():
    args = [
        *("--project-directory", "deploy", "--env-file", "x.env", "-f", "a.yaml"),
        *("--profile", "gpu", "up", "-d", "--build", "--wait", "--wait-timeout", "300"),
        *("--scale", "locust-worker=2", "locust-master", "locust-worker"),
    ]
    global_options, command, rest = podman.split_command(args)
    assert global_options == args[:8] and command == "up"
    options, services = podman.split_up(rest)
    assert services == ["locust-master", "locust-worker"]
    assert options == ["-d", "--build", "--wait", "--wait-timeout", "300", *args[-4:-2]]


def dry_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-n", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def compose_lines(printed: str) -> list[str]:
    return [line for line in printed.splitlines() if "--project-directory deploy" in line]


@pytest.mark.parametrize("target", ["up", "up-sim", "down", "logs", "ps", "load-compose"])
def test_every_compose_call_goes_through_the_engine(target):
    docker = dry_run(target, "ENV_FILE=deploy/.env.example")
    assert docker.returncode == 0, docker.stderr
    assert compose_lines(docker.stdout)
    assert all(
        "docker compose --project-directory" in line for line in compose_lines(docker.stdout)
    )
    assert "stack podman" not in docker.stdout

    on_podman = dry_run(target, "ENV_FILE=deploy/.env.example", "ENGINE=podman")
    assert on_podman.returncode == 0, on_podman.stderr
    lines = compose_lines(on_podman.stdout)
    assert lines and all("-m ops podman compose --project-directory" in line for line in lines)
    assert "docker compose" not in on_podman.stdout


@pytest.mark.parametrize("target", ["up", "up-sim"])
def test_the_checks_are_told_the_engine(target):
    printed = dry_run(target, "ENV_FILE=deploy/.env.example", "ENGINE=podman").stdout
    checks = [line for line in printed.splitlines() if "-m ops preflight" in line]
    checks += [line for line in printed.splitlines() if "-m ops check-stack" in line]
    assert len(checks) == 3 and all("--engine podman" in line for line in checks), printed


def test_make_down_on_podman_stops_what_the_route_started():
    assert "-m ops podman stop" in dry_run("down", "ENGINE=podman").stdout
    assert "-m ops podman stop" not in dry_run("down").stdout


def test_an_unknown_engine_is_refused():
    done = dry_run("ps", "ENGINE=nerdctl")
    assert done.returncode != 0 and "ENGINE=nerdctl: docker or podman" in done.stderr
