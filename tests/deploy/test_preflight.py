"""`make up` names what is missing before it starts anything (a fake `docker` on PATH)."""

from __future__ import annotations

import socket
import stat
from pathlib import Path

import pytest

from stack import compose
from stack.preflight import problems
from tests.support import free_port


def example_env(**replace: str) -> str:
    """.env.example on free published ports (a running demo must not decide these tests)."""
    replace = {
        "LOOP_PUBLISHED_PORT": str(free_port()),
        "MCP_PUBLISHED_PORT": str(free_port()),
        **replace,
    }
    return "\n".join(
        f"{line.split('=', 1)[0]}={replace[line.split('=', 1)[0]]}"
        if line.split("=", 1)[0] in replace
        else line
        for line in compose.EXAMPLE_ENV.read_text().splitlines()
    )


def fake_docker(bin_dir: Path, *, compose_ok: bool, info: str | None) -> None:
    """A `docker` that answers `compose version` and `docker info` as told."""
    info_branch = (
        f"echo '{info}'; exit 0" if info is not None else "echo 'Cannot connect' >&2; exit 1"
    )
    script = bin_dir / "docker"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = compose ]; then {"echo v2.40.3; exit 0" if compose_ok else "exit 1"}; fi\n'
        f'if [ "$1" = info ]; then {info_branch}; fi\n'
        "exit 1\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def path_with(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return bin_dir


def test_no_docker_at_all(path_with, monkeypatch):
    monkeypatch.setenv("PATH", str(path_with))
    assert problems(sim=False) == [
        "docker is not installed (https://docs.docker.com/engine/install/)"
    ]


def test_no_engine_no_compose_no_env_file(path_with, tmp_path):
    fake_docker(path_with, compose_ok=False, info=None)
    found = problems(sim=False, env_file=tmp_path / ".env")
    assert any("Compose v2 plugin is missing" in p for p in found)
    assert any("engine is not reachable" in p for p in found)
    assert any(".env is missing: cp deploy/.env.example deploy/.env" in p for p in found)


def test_gpu_layout_needs_the_nvidia_runtime_and_the_model(path_with, tmp_path):
    fake_docker(path_with, compose_ok=True, info='{"runc":{"path":"runc"}}')
    env = tmp_path / ".env"
    env.write_text(example_env(MODEL_DIR=str(tmp_path / "nowhere")))
    found = problems(sim=False, env_file=env)
    assert any("no NVIDIA runtime" in p for p in found)
    assert any("does not exist on this host" in p for p in found)
    # the simulator layout needs neither
    assert problems(sim=True, env_file=env) == []


def test_everything_present(path_with, tmp_path):
    fake_docker(path_with, compose_ok=True, info='{"nvidia":{"path":"nvidia-container-runtime"}}')
    model = tmp_path / "models" / "leave-copilot"
    model.mkdir(parents=True)
    env = tmp_path / ".env"
    env.write_text(example_env(MODEL_DIR=str(tmp_path / "models")))
    assert problems(sim=False, env_file=env) == [
        f"VLLM_MODEL /models/leave-copilot has no config.json at {model} (merged weights expected)"
    ]
    (model / "config.json").write_text("{}")
    assert problems(sim=False, env_file=env) == []


def test_a_tool_parser_plugin_must_be_a_file_in_the_mounted_folder(path_with, tmp_path):
    fake_docker(path_with, compose_ok=True, info='{"nvidia":{"path":"nvidia-container-runtime"}}')
    (tmp_path / "models" / "leave-copilot").mkdir(parents=True)
    (tmp_path / "models" / "leave-copilot" / "config.json").write_text("{}")
    env = tmp_path / ".env"
    settings = {"MODEL_DIR": str(tmp_path / "models"), "VLLM_TOOL_CALL_PARSER": "json_tool_calls"}
    env.write_text(example_env(**settings, VLLM_TOOL_PARSER_PLUGIN="json_tool_calls.py"))
    assert problems(sim=False, env_file=env) == []  # the plugin shipped in deploy/tool-parsers
    env.write_text(example_env(**settings, VLLM_TOOL_PARSER_PLUGIN="missing.py"))
    [problem] = problems(sim=False, env_file=env)
    assert problem.startswith("VLLM_TOOL_PARSER_PLUGIN: no file") and "missing.py" in problem


def test_a_published_port_held_by_another_program_is_named(path_with, tmp_path):
    fake_docker(path_with, compose_ok=True, info="{}")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = tmp_path / ".env"
        env.write_text(example_env(LOOP_PUBLISHED_PORT=str(port)))
        assert problems(sim=True, env_file=env) == [
            f"127.0.0.1:{port} (loop) is already in use by another program: stop it or "
            "choose another port in deploy/.env"
        ]
    assert problems(sim=True, env_file=env) == []
