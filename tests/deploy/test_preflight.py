"""`make up` names what is missing before it starts anything (a fake `docker` on PATH)."""

from __future__ import annotations

import socket
import stat
from pathlib import Path

import pytest

from ops import compose
from ops.preflight import EXAMPLE_SECRETS, problems, warnings
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


def fake_nvidia_smi(bin_dir: Path, gpus: int) -> None:
    """An `nvidia-smi` that lists `gpus` GPUs as `--query-gpu=index,uuid` prints them."""
    rows = "\n".join(f"{i}, GPU-{i:08d}-0000-0000-0000-000000000000" for i in range(gpus))
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' '{rows}'\n" if gpus else "#!/bin/sh\nexit 9\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def path_with(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    fake_nvidia_smi(bin_dir, 1)  # a one-GPU host, unless a test says otherwise
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


def gpu_host(path_with: Path, tmp_path: Path, gpus: int, **settings: str) -> Path:
    """A GPU host with `gpus` GPUs, the model in place and deploy/.env saying `settings`."""
    fake_docker(path_with, compose_ok=True, info='{"nvidia":{"path":"nvidia-container-runtime"}}')
    fake_nvidia_smi(path_with, gpus)
    model = tmp_path / "models" / "leave-copilot"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text("{}")
    env = tmp_path / ".env"
    env.write_text(example_env(MODEL_DIR=str(tmp_path / "models"), **settings))
    return env


def test_gpus_the_host_does_not_have_are_named_before_anything_starts(path_with, tmp_path):
    env = gpu_host(path_with, tmp_path, 2, VLLM_GPUS="4")
    assert problems(sim=False, env_file=env) == [
        "VLLM_GPUS/VLLM_GPU_IDS ask for GPU 2, 3, which this host does not have "
        "(nvidia-smi lists 0, 1)"
    ]
    env = gpu_host(path_with, tmp_path, 4, VLLM_GPUS="4", VLLM_TENSOR_PARALLEL_SIZE="2")
    assert problems(sim=False, env_file=env) == []
    # the simulator layout stands for GPUs, it needs none
    env = gpu_host(path_with, tmp_path, 0, VLLM_GPUS="4")
    assert problems(sim=True, env_file=env) == []


def test_a_host_without_a_driver_says_the_gpus_cannot_be_checked(path_with, tmp_path):
    env = gpu_host(path_with, tmp_path, 0, VLLM_GPUS="2")
    assert problems(sim=False, env_file=env) == [
        "nvidia-smi does not answer, so GPUs 0, 1 cannot be checked: install the NVIDIA "
        "driver (or use `make up-sim`)"
    ]


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"VLLM_GPUS": "9"}, "VLLM_GPUS=9: this layout serves 1 to 8 GPUs on one host"),
        ({"VLLM_GPUS": "two"}, "VLLM_GPUS='two' is not a whole number"),
        (
            {"VLLM_GPUS": "4", "VLLM_TENSOR_PARALLEL_SIZE": "3"},
            "VLLM_TENSOR_PARALLEL_SIZE=3 does not divide VLLM_GPUS=4: each replica spans the "
            "same number of GPUs",
        ),
        (
            {"VLLM_GPUS": "2", "VLLM_GPU_IDS": "1"},
            "VLLM_GPU_IDS names 1 GPUs, VLLM_GPUS asks for 2",
        ),
        ({"VLLM_GPUS": "2", "VLLM_GPU_IDS": "1,1"}, "VLLM_GPU_IDS=1,1 names a GPU twice"),
    ],
)
def test_a_layout_that_cannot_be_served_is_one_line(path_with, tmp_path, settings, said):
    env = gpu_host(path_with, tmp_path, 8, **settings)
    assert problems(sim=False, env_file=env) == [said]


def test_a_production_box_refuses_the_published_example_secrets(path_with, tmp_path):
    env = gpu_host(path_with, tmp_path, 1, MCP_ENV="production")
    assert problems(sim=False, env_file=env) == [
        f"MCP_ENV=production but {name} is the published example's value: set a fresh one ({hint})"
        for name, hint in EXAMPLE_SECRETS.items()
    ]
    fresh = {"MCP_ELICITATION_STATE_KEY": "f" * 64, "GRAFANA_ADMIN_PASSWORD": "a-fresh-one"}
    env = gpu_host(path_with, tmp_path, 1, MCP_ENV="production", **fresh)
    assert problems(sim=False, env_file=env) == []
    assert warnings(env) == [  # alerts that would reach nobody are said, not refused
        "ALERTMANAGER_WEBHOOK_URL is empty: alerts are shown at Alertmanager's port and sent to "
        "nobody (docs/operations.md#alerts)"
    ]
    env = gpu_host(path_with, tmp_path, 1, MCP_ENV="production", **fresh,
                   ALERTMANAGER_WEBHOOK_URL="https://hooks.example.com/T0/B0")  # fmt: skip
    assert warnings(env) == []


def test_a_laptop_is_told_it_runs_with_development_defaults_and_is_not_stopped(tmp_path):
    env = tmp_path / ".env"
    env.write_text(example_env())
    said = warnings(env)
    assert said[0].startswith("MCP_ENV=development: the seed job writes demo employees")
    assert {w.split()[0] for w in said[1:]} == set(EXAMPLE_SECRETS)
