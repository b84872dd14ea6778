"""The image's health probe: the right endpoint for each role, and a clear verdict."""

from __future__ import annotations

import subprocess
import sys

import pytest

from common import healthprobe
from tests.support import REPO_ROOT, model_simulator


def fake_proc(tmp_path, *processes: tuple[list[str], dict[str, str]]):
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)  # non-numeric entries are not processes
    for pid, (argv, environ) in enumerate(processes, start=1):
        entry = proc / str(pid)
        entry.mkdir()
        (entry / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (entry / "environ").write_bytes(
            b"\0".join(f"{k}={v}".encode() for k, v in environ.items()) + b"\0"
        )
    return proc


@pytest.mark.parametrize(
    ("argv", "environ", "url"),
    [
        (["python", "-m", "loop"], {}, "http://127.0.0.1:8080/healthz"),
        (["python", "-m", "mcp_server"], {"MCP_PORT": "9999"}, "http://127.0.0.1:9999/readyz"),
        (["/app/.venv/bin/python", "-m", "modelsim"], {}, "http://127.0.0.1:8000/health"),
    ],
)
def test_discovers_the_service_of_this_container(tmp_path, argv, environ, url):
    found, _ = healthprobe.discover(fake_proc(tmp_path, (["sleep", "1"], {}), (argv, environ)))
    assert found == url


def test_a_one_shot_job_needs_no_endpoint(tmp_path):
    found, what = healthprobe.discover(
        fake_proc(tmp_path, (["python", "-m", "mcp_server", "seed"], {}))
    )
    assert found is None and "one-shot" in what


def test_nothing_to_probe_is_unhealthy(tmp_path):
    found, what = healthprobe.discover(fake_proc(tmp_path, (["sleep", "1"], {})))
    assert found == "" and "none of our services" in what


def test_probes_a_real_endpoint_by_its_status(tmp_path):
    with model_simulator(tmp_path, profile="instant") as base:
        assert healthprobe.probe(f"{base}/health")[0]
        healthy, detail = healthprobe.probe(f"{base}/no-such-path")
        assert not healthy and "404" in detail
    healthy, detail = healthprobe.probe(f"{base}/health")  # stopped now
    assert not healthy and "refused" in detail.lower()


def test_the_command_line_exit_code_is_the_verdict(tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "common.healthprobe", *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        )

    with model_simulator(tmp_path, profile="instant") as base:
        ok = run(f"{base}/health")
    assert ok.returncode == 0 and ok.stdout.startswith("healthy")
    down = run(f"{base}/health")
    assert down.returncode == 1 and down.stdout.startswith("unhealthy")
