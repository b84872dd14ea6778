"""The demo's closing load sweep: a short stepped `python -m loadtest` on the local stack, the
capacity it found at the SLO, then `python -m loadtest.cost` on its summary."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .compose import REPO_ROOT

# 2, 4, 6 and 8 users (half agents, half model users), 8 s each: about 32 s of load, ~40 s
# with Locust's start, the users' last runs and Prometheus's last scrape.
FIRST_USERS, STEP_USERS, STEPS, STEP_SECONDS = 2, 2, 4, 8
STEP_ARGS = (
    *("--users", str(FIRST_USERS), "--step-users", str(STEP_USERS)),
    *("--steps", str(STEPS), "--step-seconds", str(STEP_SECONDS)),
)
COST_SETTINGS = "loadtest/cost.example.toml"
# Agent and model users share the steps, so a step's runs/s understates a replica; the cost
# counts every token served as equal work instead (docs/loadtest.md, "What a request is").
COST_ARGS = ("--capacity-basis", "tokens")
TIMEOUT_SECONDS = 180
TAIL_LINES = 25


class SweepError(Exception):
    """The sweep or the cost calculator failed; the message says why."""


def _run(args: list[str], what: str) -> str:
    try:
        done = subprocess.run(
            [sys.executable, "-m", *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired:
        raise SweepError(f"{what} did not finish within {TIMEOUT_SECONDS} s") from None
    output = done.stdout + done.stderr
    if done.returncode != 0:
        tail = "\n".join(output.splitlines()[-TAIL_LINES:])
        raise SweepError(f"{what} exited with status {done.returncode}:\n{tail}")
    return output


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def step_table(summary: dict[str, Any]) -> list[str]:
    header = ("users", "runs/s", "run p95 ms", "model req/s", "TTFT p99 ms", "ITL p99 ms", "SLO")
    rows = [header]
    for step in summary["steps"]:
        agent, model = step["agent"] or {}, step["model"] or {}
        rows.append(
            (
                str(step["users"]),
                f"{agent.get('runs_per_s', 0.0):.2f}",
                _ms((agent.get("run_ms") or {}).get("p95")),
                f"{model.get('requests_per_s', 0.0):.2f}",
                _ms((model.get("ttft_ms") or {}).get("p99")),
                _ms((model.get("itl_ms") or {}).get("p99")),
                "met" if step["slo_met"] else "broken: " + "; ".join(step["slo_broken"]),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    return [
        "  " + "  ".join(c.rjust(w) for c, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in rows
    ]


def capacity_line(summary: dict[str, Any]) -> str:
    capacity, slo = summary["capacity_at_slo"], summary["slo"]
    target = (
        f"TTFT p99 ≤ {slo['ttft_p99_ms']:g} ms, ITL p99 ≤ {slo['itl_p99_ms']:g} ms, "
        f"run p95 ≤ {slo['run_p95_ms']:g} ms"
    )
    if capacity is None:
        return f"capacity at the SLO: none — no step met it ({target})"
    tokens = capacity["input_tokens_per_s"] + capacity["output_tokens_per_s"]
    # The simulator models an H200 (max_num_seqs 256): on a small machine the load generator
    # and the stack's CPU run out long before its knee, so the last step often still passes.
    last = capacity["step"] == summary["steps"][-1]["step"]
    lower = (
        "\n  (the highest step tested, so a lower bound: `make load` with more steps finds the "
        "knee)"
        if last
        else ""
    )
    return (
        f"capacity at the SLO: {capacity['users']} users — {capacity['runs_per_s']:.2f} runs/s + "
        f"{capacity['model_requests_per_s']:.2f} model requests/s, {tokens:,.0f} tokens/s "
        f"({target}){lower}"
    )


def cost_headline(cost_md: str) -> list[str]:
    """The report's title and its first two tables (per request, break-even)."""
    lines = cost_md.splitlines()
    sections = [i for i, line in enumerate(lines) if line.startswith("## ")]
    end = sections[2] if len(sections) > 2 else len(lines)
    return [line for line in lines[:end] if line.strip()]


def run_sweep(loop_url: str, model_url: str) -> None:
    """Run the sweep and the cost calculator, printing what they found; SweepError if either
    fails or no step met the SLO."""
    print(
        f"\nLoad sweep: agent + model users in {STEPS} steps of {STEP_SECONDS} s on the local "
        "stack (`make demo DEMO_LOAD=0` skips it) …",
        flush=True,
    )
    started = time.monotonic()
    output = _run(
        [
            *("loadtest", "--loop-url", loop_url, "--model-url", f"{model_url}/v1"),
            *("--user-classes", "agent,model", "--shape", "steps", *STEP_ARGS),
        ],
        "the load sweep (python -m loadtest)",
    )
    found = re.search(r"^summary: (.+)$", output, re.MULTILINE)
    if found is None:
        raise SweepError("the load sweep wrote no summary:\n" + output[-2000:])
    summary_path = Path(found.group(1).strip())
    summary = json.loads((REPO_ROOT / summary_path).read_text())
    print(f"  took {time.monotonic() - started:.0f} s; results in {summary_path.parent}/")
    for line in step_table(summary):
        print(line)
    print(capacity_line(summary))
    if summary["capacity_at_slo"] is None:
        raise SweepError("no step of the sweep met the SLO, so there is no capacity to cost")
    _run(
        ["loadtest.cost", str(summary_path), "--settings", COST_SETTINGS, *COST_ARGS],
        "the cost calculator (python -m loadtest.cost)",
    )
    folder = summary_path.parent
    print()
    for line in cost_headline((REPO_ROOT / folder / "cost.md").read_text()):
        print(line)
    print(
        f"\nFull cost report: {folder / 'cost.md'}\n"
        f"  chart  {folder / 'cost.png'}\n"
        f"  report {folder / 'cost.html'}  (chart and every table)"
    )
