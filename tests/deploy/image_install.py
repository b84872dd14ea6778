"""The image's Python environment made without containers: the files a Dockerfile's builder
stage copies and its `uv sync` flags, then commands run from outside the source tree."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

DOCKERFILE = REPO_ROOT / "docker" / "Dockerfile"
UV = REPO_ROOT / ".tools" / "bin" / "uv"


def builder_stage(dockerfile: Path = DOCKERFILE) -> str:
    text = dockerfile.read_text()
    return text[text.index(" AS builder") : text.index(" AS runtime")]


def runtime_stage(dockerfile: Path = DOCKERFILE) -> str:
    text = dockerfile.read_text()
    return text[text.index(" AS runtime") :]


def copied_sources(dockerfile: Path = DOCKERFILE, stage: str = "builder") -> list[str]:
    """What a stage COPYs from the build context (not from other images or stages)."""
    text = builder_stage(dockerfile) if stage == "builder" else runtime_stage(dockerfile)
    sources: list[str] = []
    for line in re.sub(r"\\\n\s*", " ", text).splitlines():
        words = [w for w in line.split() if not w.startswith("--chown")]
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            sources += words[1:-1]
    return sources


def final_sync_flags(dockerfile: Path = DOCKERFILE) -> list[str]:
    syncs = re.findall(r"uv sync ([^\n]+)", builder_stage(dockerfile))
    return shlex.split(syncs[-1])


def install_like(dockerfile: Path, context: Path) -> Path:
    """The builder stage's environment, made as it makes it; returns its python."""
    if not UV.exists():
        pytest.fail("no .tools/bin/uv: run the tests through `make test`")
    context.mkdir(parents=True, exist_ok=True)
    for source in copied_sources(dockerfile):
        origin = REPO_ROOT / source
        if origin.is_dir():
            shutil.copytree(origin, context / source, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, context / source)
    venv = context / ".venv"
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv), "UV_PYTHON_DOWNLOADS": "0"}
    env.pop("VIRTUAL_ENV", None)
    flags = final_sync_flags(dockerfile)
    done = subprocess.run(
        [str(UV), "sync", *flags, "--python", shutil.which("python3") or "python3"],
        cwd=context,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return venv / "bin" / "python"


def run_isolated(
    python: Path, *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    # From an empty folder, so only the installed packages can be imported, never the repo's.
    empty = python.parent.parent.parent / "empty"
    empty.mkdir(exist_ok=True)
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run(
        [str(python), *args],
        cwd=cwd or empty,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
