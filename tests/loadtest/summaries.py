"""One fixed raw log, and summary.json as each version of loadtest.results wrote it from that log
(tests/fixtures/loadtest-summaries/<commit>.json), for the summary model's tests.

The files were written by the writer of each commit itself, not typed by hand: the commit's
loadtest/ is extracted from git and its write_summary runs on RECORDS and STEPS, with Prometheus
off and, from 6fc8601 on (where write_summary takes them), the backend a real simulator
identified itself as and the load block of a two-step sweep. To write them again:

    .venv/bin/python -m tests.loadtest.summaries 419942b 25dee20 cbd7e68 64dd871 6fc8601 f1d2d92

Commits, and what each added to summary.json: 419942b the first (each scenario a run count);
25dee20 the facade user; cbd7e68 the spike shape's phase; 64dd871 Prometheus's figures; 6fc8601
backend, load, per-scenario blocks and confirmations; f1d2d92 the writer as it was when
summary.json got its model (loadtest/summary.py), whose file the model's writer must equal.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "loadtest-summaries"
REPO_ROOT = Path(__file__).resolve().parent.parent.parent
# what the files were written with: an SLO of ints (as the tests' Slo(200, 50, 5000)) and a
# two-step sweep of agent, facade and model users
SLO = {"ttft_p99_ms": 200, "itl_p99_ms": 50, "run_p95_ms": 5000}
LOAD = {"user_classes": "agent,facade,model", "shape": "steps", "users": 4, "step_users": 4,
        "steps": 2, "step_seconds": 10}  # fmt: skip
STEPS = [{"step": 0, "users": 4, "start": 0.0}, {"step": 1, "users": 8, "start": 10.0}]


def _run(kind: str, name: str, start: float, run_ms: float, tools: list[str],
         confirmations: int = 0) -> dict[str, Any]:  # fmt: skip
    return {"kind": kind, "name": name, "start": start, "end": start + run_ms / 1000, "ok": True,
            "error": None, "prompt_tokens": 3000, "output_tokens": 100, "turns": len(tools) + 1,
            "tool_calls": len(tools), "tools": tools, "tool_errors": 0,
            "confirmations": confirmations, "first_answer_ms": 300.0, "run_ms": run_ms}  # fmt: skip


def _completion(start: float, ttft_ms: float) -> dict[str, Any]:
    return {"kind": "model", "name": "chat", "start": start, "end": start + 0.2, "ok": True,
            "error": None, "ttft_ms": ttft_ms, "itl_ms": [10.0, 12.0], "tpot_ms": 11.0,
            "e2e_ms": ttft_ms + 22.0, "prompt_tokens": 1500, "output_tokens": 3}  # fmt: skip


def records() -> list[dict[str, Any]]:
    """Step 0 meets the SLO; step 1's runs take 9 s and one run fails its setup."""
    found = []
    for step, (first, run_ms) in enumerate(((0.0, 1200.0), (10.0, 9000.0))):
        for i in range(20):
            t = first + i / 2
            found.append(_run("agent", "query", t, run_ms, ["search_leaves"]))
            if i % 4 == 0:
                tools = ["search_leaves", "cancel_leave"]
                found.append(_run("agent", "cancel_accepted", t, run_ms, tools, 1))
            if i % 5 == 0:
                found.append(_run("facade", "query", t, run_ms, []))
            found.append(_completion(t, 80.0 + step * 10))
    found.append({"kind": "agent", "name": "submit", "start": 13.0, "end": 13.5, "ok": False,
                  "error": "setup: no day left"})  # fmt: skip
    return found


def write_run_folder(folder: Path) -> None:
    """The raw log and steps a Locust run would have left in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "raw-host-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records()))
    (folder / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in STEPS))


def identified(summary: dict[str, Any]) -> dict[str, Any]:
    """The backend block as loadtest.backend.identify gave it, before the summary's Prometheus
    step added its note (Prometheus off: the GPUs were not read from DCGM)."""
    return {**summary["backend"], "notes": summary["backend"]["notes"][:-1]}


def _write_with_this_tree(out: Path, model_url: str) -> None:
    """Run inside the extracted commit: its loadtest is first on sys.path."""
    from loadtest import results

    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        write_run_folder(folder)
        params = inspect.signature(results.write_summary).parameters
        args: list[Any] = ["off"] if "prometheus_url" in params else []
        if "backend" in params:
            from loadtest import backend
            from loadtest.__main__ import _load
            from loadtest.settings import LoadSettings

            load = _load(LoadSettings(**LOAD))
            args += [backend.identify(model_url), load]
        results.write_summary(folder, results.Slo(**SLO), *args)
        out.write_text((folder / "summary.json").read_text())


def main(commits: list[str]) -> None:
    sys.path.insert(0, str(REPO_ROOT))
    from ops.services import model_simulator

    FIXTURES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work, model_simulator(Path(work)) as sim:
        for commit in commits:
            tree = Path(work) / commit
            archive = subprocess.run(
                ["git", "archive", commit, "loadtest"], cwd=REPO_ROOT, capture_output=True,
                check=True,
            )  # fmt: skip
            with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
                tar.extractall(tree, filter="data")
            env = {k: v for k, v in os.environ.items() if not k.startswith("LOAD_")}
            env["PYTHONPATH"] = f"{tree}{os.pathsep}{REPO_ROOT}"
            out = FIXTURES / f"{commit}.json"
            code = (
                "import sys; from pathlib import Path; from tests.loadtest.summaries import "
                "_write_with_this_tree as w; w(Path(sys.argv[1]), sys.argv[2])"
            )
            subprocess.run(
                [sys.executable, "-c", code, str(out), f"{sim}/v1"], cwd=tree, env=env, check=True
            )
            print(f"{commit} → {out.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
