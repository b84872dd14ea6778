"""`make demo` from a fresh clone: the first README command, end to end."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time

import pytest

from stack.compose import REPO_ROOT
from tests.support import free_port


# the clone's install, the scenarios and the ~40 s load sweep: over a minute here
@pytest.mark.timeout(300)
def test_make_demo_on_a_fresh_clone(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO_ROOT), str(clone)], check=True)
    env = {
        **os.environ,
        # free ports, so the test never collides with a stack the developer is running
        "LOOP_PUBLISHED_PORT": str(free_port()),
        "MCP_PUBLISHED_PORT": str(free_port()),
        "LOCAL_MODEL_PORT": str(free_port()),
        "PROMETHEUS_PUBLISHED_PORT": str(free_port()),
    }
    env.pop("VIRTUAL_ENV", None)
    started = time.monotonic()
    try:
        demo = subprocess.run(
            ["make", "demo"], cwd=clone, env=env, capture_output=True, text=True, timeout=600
        )
        elapsed = time.monotonic() - started
        print(f"make demo from a fresh clone took {elapsed:.1f} s")
        assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
        out = demo.stdout
        assert "已將 LV-" in out and "送出審核。" in out
        assert "找到 4 張假單" in out
        assert "維持已核准" in out and "已取消假單" in out
        assert "NOT AS EXPECTED" not in out
        # the closing load sweep: its steps, the capacity found, the cost headline, the files
        assert re.search(r"users\s+runs/s\s+run p95 ms\s+model req/s\s+TTFT p99 ms", out), out
        assert re.search(r"capacity at the SLO: \d+ users — [\d.]+ runs/s", out), out[-3000:]
        assert "# Self-hosted fine-tune on 1 × H200 vs" in out
        assert re.search(r"\| view\s+\| agent runs/day \| GPUs \| \$/day each", out), out
        (chart,) = re.findall(r"^  chart  (\S+/cost\.png)$", out, re.MULTILINE)
        (page,) = re.findall(r"^  report (\S+/cost\.html)", out, re.MULTILINE)
        assert (clone / chart).stat().st_size > 0 and (clone / page).is_file()
        assert f"http://127.0.0.1:{env['LOOP_PUBLISHED_PORT']}" in out
        if shutil.which("prometheus"):  # the same monitoring/ files, read back live
            assert "completed runs     4" in out, out[-2000:]
            assert re.search(r"TTFT p95 \(model\)\s+\d+ ms", out), out[-2000:]
        else:
            assert "Prometheus      not installed, so not started" in out
        status = subprocess.run(
            [str(clone / ".venv/bin/python"), "-m", "stack", "status"],
            cwd=clone,
            capture_output=True,
            text=True,
        )
        assert "loop" in status.stdout  # left running, as the README says
    finally:
        stop = subprocess.run(["make", "stop"], cwd=clone, env=env, capture_output=True, text=True)
    assert "stopped: loop, mcp-server" in stop.stdout and "vllm" in stop.stdout
