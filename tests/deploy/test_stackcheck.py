"""`make up` never reports success for a stack that is not ready (a fake `docker` on PATH)."""

from __future__ import annotations

import json
import stat
import subprocess
import sys

import pytest

from ops import compose
from ops.__main__ import main as stack_main
from ops.compose import EXAMPLE_ENV
from tests.support import REPO_ROOT, mcp_server, model_simulator

CONFIG = {
    "services": {
        "mcp-seed": {"restart": "no"},
        "vllm": {"healthcheck": {"test": ["CMD", "true"]}},
        "loop": {
            "healthcheck": {"test": ["CMD", "true"]},
            "ports": [{"published": "PORT", "host_ip": "127.0.0.1"}],
        },
    }
}


CHECK_STACK = [sys.executable, "-m", "ops", "check-stack", "--sim", "--timeout", "0"]


def fake_docker(bin_dir, containers: list[dict], loop_port: int, config: str | None = None) -> None:
    if config is None:
        config = json.dumps(CONFIG).replace('"PORT"', str(loop_port))
    ps = "\n".join(json.dumps(c) for c in containers)
    script = bin_dir / "docker"
    script.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in\n'
        f"  config) echo '{config}'; exit 0;;\n"
        f"  ps) printf '%s\\n' '{ps}'; exit 0;;\n"
        "  logs) echo 'loop-1  | ERROR: cannot reach http://vllm:8000/v1'; exit 0;;\n"
        "esac; done\nexit 1\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def check_stack(bin_dir) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CHECK_STACK, "--env-file", str(EXAMPLE_ENV)],
        cwd=REPO_ROOT,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def container(service: str, state: str, health: str = "", exit_code: int = 0) -> dict:
    return {"Service": service, "State": state, "Health": health, "ExitCode": exit_code}


def test_an_unhealthy_service_is_named_with_its_log(tmp_path):
    fake_docker(
        tmp_path,
        [
            container("mcp-seed", "exited"),
            container("vllm", "running", "healthy"),
            container("loop", "running", "starting"),  # what `up --wait` let through
        ],
        loop_port=1,
    )
    done = check_stack(tmp_path)
    assert done.returncode == 1
    assert "✗ loop is not ready: health starting" in done.stdout
    assert "cannot reach http://vllm:8000/v1" in done.stdout
    assert "vllm is not ready" not in done.stdout


def test_a_failed_one_shot_job_and_a_missing_container_are_named(tmp_path):
    fake_docker(tmp_path, [container("mcp-seed", "exited", exit_code=1)], loop_port=1)
    done = check_stack(tmp_path)
    assert done.returncode == 1
    assert "✗ mcp-seed is not ready: one-shot job exited, exit code 1" in done.stdout
    assert "✗ vllm is not ready: no container" in done.stdout


def test_healthy_containers_still_need_their_readiness_endpoint(tmp_path):
    healthy = [
        container("mcp-seed", "exited"),
        container("vllm", "running", "healthy"),
        container("loop", "running", "healthy"),
    ]
    with model_simulator(tmp_path, profile="instant") as base:
        port = int(base.rsplit(":", 1)[1])
        fake_docker(tmp_path, healthy, loop_port=port)
        # the simulator has no /readyz: a 404 there is "not ready"
        refused = check_stack(tmp_path)
    assert refused.returncode == 1 and "/readyz answered 404" in refused.stdout


def test_a_ready_stack_passes(tmp_path):
    healthy = [
        container("mcp-seed", "exited"),
        container("vllm", "running", "healthy"),
        container("loop", "running", "healthy"),
    ]
    with mcp_server(tmp_path) as base:  # a real server whose /readyz answers 200
        fake_docker(tmp_path, healthy, loop_port=int(base.rsplit(":", 1)[1]))
        done = check_stack(tmp_path)
    assert done.returncode == 0, done.stdout
    assert "✓ every service is ready" in done.stdout


@pytest.mark.parametrize("printed", ["", "compose is not a docker command"])
def test_a_compose_that_prints_no_json_is_one_line_not_a_traceback(tmp_path, printed):
    """A wrapper script or an old Compose answers `config --format json` with no JSON."""
    fake_docker(tmp_path, [], loop_port=1, config=printed)
    done = check_stack(tmp_path)
    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("✗")]
    assert line.startswith("✗ compose is not ready: `docker compose config --format json` printed")
    assert "Compose v2" in line


def test_stack_commands_say_in_one_line_when_compose_prints_no_json(tmp_path, monkeypatch, capsys):
    """`python -m ops urls` (the end of `make up`) reads the project through the compose
    binary too."""
    script = tmp_path / "docker-compose"
    script.write_text("#!/bin/sh\necho 'not json'\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(compose, "compose_binary", lambda: str(script))
    assert stack_main(["urls", "--sim"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "✗ `docker compose config --format json` printed no JSON project (it printed "
        "'not json'): the bundle needs the Docker Compose v2 plugin (`docker compose version` "
        "says v2.x)"
    ]
