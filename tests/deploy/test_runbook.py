"""The runbook (docs/operations.md) runs as written: its compose command is the one `make up` /
`make up-sim` use, and its backup block, run verbatim, makes backups that restore."""

from __future__ import annotations

import os
import re
import shlex
import sqlite3
import stat
import subprocess
import sys
from contextlib import closing

from loop.store import RunStore
from ops.compose import REPO_ROOT
from tests.support import run_to_exit

RUNBOOK = REPO_ROOT / "docs" / "operations.md"


def _make_variables() -> dict[str, str]:
    text = (REPO_ROOT / "Makefile").read_text().replace("\\\n", " ")
    return {m[1]: m[2].strip() for m in re.finditer(r"^([A-Z_]+) *[:?]?= *(.*)$", text, re.M)}


def _expanded(value: str, variables: dict[str, str]) -> str:
    value = re.sub(r"\$\(addprefix [^)]*\)", "", value)  # COMPOSE_FILES, PROFILES: none by default
    return re.sub(
        r"\$\(([A-Z_]+)\)", lambda m: _expanded(variables.get(m[1], ""), variables), value
    )


def _compose_options(command: str) -> list[tuple[str, str]]:
    """The options that choose the project: each file, profile, env file, in order."""
    words = shlex.split(command)
    chosen = {"-f", "--file", "--profile", "--env-file", "--project-directory"}
    return [
        ("-f" if word == "--file" else word, words[i + 1])
        for i, word in enumerate(words)
        if word in chosen
    ]


def _runbook_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", RUNBOOK.read_text(), re.S)


def test_the_runbooks_compose_commands_name_the_files_make_up_and_up_sim_use():
    """$C left out deploy/compose.sim.yaml: on a simulator stack, `$C run --rm mcp-server …
    restore -` created the GPU stack's volumes."""
    variables = {**_make_variables(), "ENV_FILE": "deploy/.env"}
    make = {
        target: _compose_options(_expanded(variables[name], variables))
        for target, name in (("up", "COMPOSE"), ("up-sim", "COMPOSE_SIM"))
    }
    assert ("-f", "deploy/compose.sim.yaml") in make["up-sim"]  # the Makefile read right
    documented = [
        _compose_options(m[1])
        for block in _runbook_blocks()
        for m in re.finditer(r'^C="([^"]*)"', block, re.M)
    ]
    assert sorted(documented) == sorted(make.values())


def test_the_documented_backup_block_runs_as_written(tmp_path):
    """It ended in "No such file or directory": nothing made `backups/`. Run here with `$C`
    standing for Compose: the command after the service's name runs in this checkout."""
    (block,) = [b for b in _runbook_blocks() if "backup - > backups/" in b]
    block = re.sub(r"^C=.*\n", "", block, flags=re.M)  # the stack's Compose: faked here
    compose = tmp_path / "compose"
    compose.write_text(
        "#!/bin/sh\n"
        '# `$C exec -T SERVICE CMD…` → CMD…\nwhile [ "$1" != python ]; do shift; done\nshift\n'
        f'exec {shlex.quote(sys.executable)} "$@"\n'
    )
    compose.chmod(0o755)
    leave_url = f"sqlite:///{tmp_path / 'leave.db'}"
    loop_url = f"sqlite:///{tmp_path / 'loop.db'}"
    assert run_to_exit(["mcp_server", "seed"], {"MCP_DATABASE_URL": leave_url})[0] == 0
    RunStore(loop_url).dispose()
    site = tmp_path / "site"
    site.mkdir()
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=site,
        env={
            **os.environ,
            "C": str(compose),
            "PYTHONPATH": str(REPO_ROOT),
            "MCP_DATABASE_URL": leave_url,
            "LOOP_STORE_URL": loop_url,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    made = sorted((site / "backups").iterdir())
    assert [p.name.split("-")[0] for p in made] == ["leave", "loop"]
    for backup, table in zip(made, ("leaves", "runs"), strict=True):
        assert stat.S_IMODE(backup.stat().st_mode) == 0o600  # umask 077
        with closing(sqlite3.connect(f"file:{backup}?mode=ro&immutable=1", uri=True)) as db:
            assert db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] >= 0


def test_backups_are_kept_out_of_git():
    """`backups/` was one `git add -A` from a commit: people's data and token hashes."""
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "backups/leave-20261206T000000Z.backup"],
        cwd=REPO_ROOT,
        check=False,
    )
    assert ignored.returncode == 0
