"""`make demo` from a fresh clone: the first README command, end to end; then `make load` and
`make cost` on the stack it left running, which find it on its moved ports and give the same
answer as the demo's own sweep."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import time

import pytest

from ops.compose import REPO_ROOT
from tests.support import free_port


def break_even(report: str) -> float:
    """The break-even with hidden costs, from the verdict line of a cost report."""
    found = re.search(r"self-hosting wins from ([\d,]+)/day", report)
    assert found, report[-3000:]
    return float(found.group(1).replace(",", ""))


# the clone's install, the scenarios and the ~40 s load sweep, then the same sweep again by
# make load and the cost report: two and a half minutes here
@pytest.mark.timeout(420)
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
        # the closing load sweep: its steps, what each scenario did, the capacity found and how
        # it was derived, the cost headline with its banner and verdict, the files
        assert re.search(r"users\s+runs/s\s+run p95 ms\s+turns/run\s+tools/run\s+confirm/run", out)
        for scenario, tools in (
            ("submit", "search_leaves ×\\d+, update_leave_status ×\\d+"),
            ("cancel-accept", "search_leaves ×\\d+, cancel_approved_leave ×\\d+"),
        ):
            # a write scenario takes 3 turns and calls its write tool, whatever ran before
            assert re.search(rf"{scenario}\s+\d+\s+3\.00\s+2\.00\s+[01]\.00\s+{tools}", out), out
        assert re.search(
            r"capacity at the SLO \(run p95 ≤ 5000 ms\): \d+ users — [\d.]+ agent runs/s per "
            r"replica, summary\.json, runs/s of step \d \(\d+ users\), agent users only",
            out,
        ), out[-3000:]
        assert "(capacity from the simulator, not measured) vs GPT-5 mini" in out
        assert "> **SIMULATED BACKEND — not a GPU measurement" in out
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
            [str(clone / ".venv/bin/python"), "-m", "devtools", "status"],
            cwd=clone,
            capture_output=True,
            text=True,
        )
        assert "loop" in status.stdout  # left running, as the README says
        # the sweep ran on employees of its own, gone after it: the demo employees' leaves are
        # the seed's and the scenarios', with no 「壓測…」 leave among them
        assert "on employees of its own" in out
        with sqlite3.connect(clone / ".run/volumes/mcp-data/leave.db") as db:
            stress = db.execute("SELECT count(*) FROM leaves WHERE reason LIKE '壓測%'").fetchone()
            made = db.execute("SELECT count(*) FROM employees WHERE source = 'loadtest'").fetchone()
        assert stress == (0,) and made == (0,)

        # make load && make cost on that stack, the port variables unset: the same answer
        moved = ("LOOP_PUBLISHED_PORT", "MCP_PUBLISHED_PORT", "LOCAL_MODEL_PORT")
        plain = {k: v for k, v in env.items() if k not in moved}
        load = subprocess.run(
            ["make", "load"], cwd=clone, env=plain, capture_output=True, text=True, timeout=300
        )
        assert load.returncode == 0, load.stdout[-3000:] + load.stderr[-3000:]
        assert f"the loop at http://127.0.0.1:{env['LOOP_PUBLISHED_PORT']} (the running local" in (
            load.stdout
        )
        cost = subprocess.run(
            ["make", "cost"], cwd=clone, env=plain, capture_output=True, text=True, timeout=120
        )
        assert cost.returncode == 0, cost.stdout[-3000:] + cost.stderr[-3000:]
        demo_answer, shell_answer = break_even(out), break_even(cost.stdout)
        print(
            f"break-even: make demo {demo_answer:,.0f}, make load && make cost {shell_answer:,.0f}"
        )
        # one stack, one sweep, one cost: apart only by the run-to-run noise of the mix
        assert abs(demo_answer - shell_answer) <= 0.1 * demo_answer
    finally:
        stop = subprocess.run(["make", "stop"], cwd=clone, env=env, capture_output=True, text=True)
    assert "stopped: loop, mcp-server" in stop.stdout and "vllm" in stop.stdout
