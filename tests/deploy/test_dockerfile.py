"""The Dockerfile follows the recipe, checked by hadolint and by reading it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "docker" / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())  # join continuation lines
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            pairs.append((keyword.upper(), rest.strip()))
    return pairs


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.loadtest"])
def test_hadolint_finds_nothing(dockerfile):
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint not installed")
    path = DOCKERFILE.with_name(dockerfile)
    done = subprocess.run([hadolint, "--no-color", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_pinned_base_and_tools():
    args = {
        rest.split("=", 1)[0]: rest.split("=", 1)[1] for k, rest in instructions() if k == "ARG"
    }
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", args["PYTHON_IMAGE"])
    copies = [rest for k, rest in instructions() if k == "COPY" and "--from=ghcr.io" in rest]
    assert copies and all(re.search(r":\d+\.\d+\.\d+ ", c) for c in copies)


def test_locked_install_in_a_builder_stage_and_a_slim_runtime():
    froms = [rest for k, rest in instructions() if k == "FROM"]
    assert len(froms) == 2 and froms[0].endswith("AS builder") and "AS runtime" in froms[1]
    runs = " ".join(rest for k, rest in instructions() if k == "RUN")
    assert "uv sync --frozen --no-dev" in runs
    pairs = instructions()
    last_from = max(i for i, (k, _) in enumerate(pairs) if k == "FROM")
    runtime = pairs[last_from:]
    assert not any("uv sync" in rest for k, rest in runtime if k == "RUN")


def test_runs_as_non_root_with_exec_form_command_and_a_curl_free_healthcheck():
    pairs = instructions()
    user = [rest for k, rest in pairs if k == "USER"]
    assert user and user[-1].split(":")[0] not in ("0", "root")
    command = next(rest for k, rest in pairs if k == "CMD")
    assert json.loads(command)[0] == "python"
    healthcheck = next(rest for k, rest in pairs if k == "HEALTHCHECK")
    exec_form = healthcheck[healthcheck.index("CMD") + 3 :].strip()
    assert json.loads(exec_form)[0] == "python" and "curl" not in healthcheck


def test_dockerignore_keeps_secrets_and_state_out_of_the_build_context():
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    for entry in (".git", ".venv", ".env", "deploy/.env", "*.db", ".run"):
        assert entry in ignored, entry
