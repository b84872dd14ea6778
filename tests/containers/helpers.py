"""What the container tests share: podman as the tests call it, the engine `make up-sim` runs
on, and make itself."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

PROJECT = "leave-copilot"

EXAMPLE_ENV = REPO_ROOT / "deploy" / ".env.example"
# the tier's own compose override, through the Makefile's COMPOSE_FILES like a site's
SITE_OVERRIDE = "tests/containers/compose.podman.yaml"
LOAD_FILE = EXAMPLE_ENV.parent / "compose.load.yaml"


def env_file(folder: Path, **overrides: str) -> Path:
    lines = []
    for line in EXAMPLE_ENV.read_text().splitlines():
        key = line.split("=", 1)[0]
        lines.append(f"{key}={overrides[key]}" if key in overrides else line)
    path = folder / "compose.env"
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class Podman:
    env: dict[str, str]
    timings: dict[str, float] = field(default_factory=dict)

    def run(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["podman", *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and done.returncode != 0:
            pytest.fail(f"podman {' '.join(args[:3])} failed: {done.stderr.strip()[-800:]}")
        return done

    def project_resources(self) -> dict[str, list[str]]:
        label = f"label=com.docker.compose.project={PROJECT}"
        listings = {
            "containers": ["ps", "-a", "-q", "--filter", label],
            "volumes": ["volume", "ls", "-q", "--filter", label],
            "networks": ["network", "ls", "-q", "--filter", label],
        }
        return {kind: self.run(*args).stdout.split() for kind, args in listings.items()}


@dataclass
class Engine:
    """The environment `make up-sim ENGINE=podman` runs in (ENGINE=podman in it)."""

    podman: Podman
    env: dict[str, str]


def make(engine: Engine, *targets: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", *targets],
        cwd=REPO_ROOT,
        env=engine.env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
