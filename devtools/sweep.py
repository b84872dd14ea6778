"""The demo's closing load sweep: `python -m loadtest --employees own` on the local stack, which
is `make load` (it finds the stack through .run/urls.json and runs its default sweep) on
employees of its own, made for the sweep and removed after it, so the demo employees' leaves
stay as the demo made them; then `python -m loadtest.cost` on its summary with `make cost`'s
settings file. The demo and `make load && make cost` measure and cost the same thing by
construction: who the users act as changes no figure."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadtest.summary import CapacityReading, LoadSummary
from ops.compose import REPO_ROOT

COST_SETTINGS = "loadtest/cost.example.toml"  # the Makefile's COST_SETTINGS default
TIMEOUT_SECONDS = 180
TAIL_LINES = 25


class SweepError(Exception):
    """The sweep or the cost calculator failed; the message says why."""


def _run(args: list[str], what: str, env: Mapping[str, str] | None = None) -> str:
    try:
        done = subprocess.run(
            [sys.executable, "-m", *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECONDS,
            env=None if env is None else {**os.environ, **env},
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


def step_table(summary: LoadSummary) -> list[str]:
    header: tuple[str, ...] = ("users", "runs/s", "run p95 ms", "turns/run", "tools/run")
    header += ("confirm/run", "vLLM TTFT p95 ms" + summary.simulated_mark(), "SLO")
    rows: list[tuple[str, ...]] = [header]
    for step in summary.steps:
        agent = step.agent
        rows.append(
            (
                str(step.users),
                f"{agent.runs_per_s if agent else 0.0:.2f}",
                _ms(agent.run_ms.p95 if agent else None),
                f"{agent.turns_per_run if agent else 0.0:.2f}",
                f"{agent.tool_calls_per_run if agent else 0.0:.2f}",
                # None: a summary from before confirmations were counted
                f"{(agent.confirmations_per_run if agent else None) or 0.0:.2f}",
                _ms(step.prometheus.vllm_ttft_p95_ms if step.prometheus else None),
                "met" if step.slo_met else "broken: " + "; ".join(step.slo_broken),
            )
        )
    return _aligned(rows)


def scenario_table(summary: LoadSummary) -> list[str]:
    """What each scenario's runs did in the capacity step: the writes are visible here."""
    capacity = summary.capacity_at_slo
    step = summary.step_of(capacity.step) if capacity else None
    if step is None:
        raise SweepError("the summary has no capacity step")
    scenarios = step.agent.scenarios if step.agent else {}
    rows: list[tuple[str, ...]] = [
        ("scenario", "runs", "turns/run", "tools/run", "confirm/run", "tools called")
    ]
    for name, block in scenarios.items():
        tools = ", ".join(f"{tool} ×{n}" for tool, n in block.tools.items())
        rows.append(
            (
                name,
                str(block.runs),
                _fixed(block.turns_per_run),
                _fixed(block.tool_calls_per_run),
                _fixed(block.confirmations_per_run),
                tools or "—",
            )
        )
    return _aligned(rows)


def _fixed(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _aligned(rows: list[tuple[str, ...]]) -> list[str]:
    """Right-aligned numbers, the last column as it is."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  " + "  ".join(c.rjust(w) for c, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in rows
    ]


def capacity_line(summary: LoadSummary, cost: dict[str, Any] | None = None) -> str:
    """The capacity at the SLO and, from the cost report, the capacity per replica it costs
    and how that was derived, in one line."""
    capacity, slo = summary.capacity_at_slo, summary.slo
    target = f"run p95 ≤ {slo.run_p95_ms:g} ms"
    if capacity is None:
        return f"capacity at the SLO: none — no step met it ({target})"
    line = f"capacity at the SLO ({target}): {capacity.users} users"
    if cost is not None:
        workload = cost["workload"]
        line += (
            f" — {workload['capacity_per_s']:.2f} {cost['unit']}s/s per replica, "
            f"{workload['sources']['capacity_per_s']}"
        )
    reading, shown_by = summary.capacity_reading()
    if reading is CapacityReading.LOWER_BOUND:
        # the simulator models an H200: on a small machine the last step often still passes
        line += " (the highest step tested, still rising: a lower bound)"
    elif reading is CapacityReading.SATURATED and shown_by is not None:
        line += f" (saturated: {shown_by.users} users were served no more)"
    return line


def cost_headline(cost_md: str) -> list[str]:
    """The report's title and its first two tables (per request, break-even)."""
    lines = cost_md.splitlines()
    sections = [i for i, line in enumerate(lines) if line.startswith("## ")]
    end = sections[2] if len(sections) > 2 else len(lines)
    return [line for line in lines[:end] if line.strip()]


def sweep_command(mcp_settings: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """`python -m loadtest` on employees of its own, and the environment its operator commands
    need to reach the stack's leave database (the MCP server's MCP_* settings): the demo
    employees' leaves stay as the demo made them, with no 「壓測…」 leaves among them."""
    env = {k: v for k, v in mcp_settings.items() if k.startswith("MCP_")}
    return ["loadtest", "--employees", "own"], env


def run_sweep(mcp_settings: Mapping[str, str]) -> None:
    """Run the sweep and the cost calculator as `make load` and `make cost` do, printing what
    they found; SweepError if either fails or no step met the SLO. `mcp_settings`: the local
    MCP server's environment (the sweep's own employees are made on its database)."""
    print(
        "\nLoad sweep: `make load` on this stack (python -m loadtest, its default sweep of agent "
        "users, on employees of its own; `make demo DEMO_LOAD=0` skips it) …",
        flush=True,
    )
    started = time.monotonic()
    command, env = sweep_command(mcp_settings)
    output = _run(command, "the load sweep (python -m loadtest)", env)
    found = re.search(r"^summary: (.+)$", output, re.MULTILINE)
    if found is None:
        raise SweepError("the load sweep wrote no summary:\n" + output[-2000:])
    summary_path = Path(found.group(1).strip())
    summary = LoadSummary.read(REPO_ROOT / summary_path)
    print(f"  took {time.monotonic() - started:.0f} s; results in {summary_path.parent}/")
    for line in step_table(summary):
        print(line)
    if summary.capacity_at_slo is None:
        print(capacity_line(summary))
        raise SweepError("no step of the sweep met the SLO, so there is no capacity to cost")
    print("  in the capacity step, per scenario (each on a leave of the user's own):")
    for line in scenario_table(summary):
        print(line)
    _run(
        ["loadtest.cost", str(summary_path), "--settings", COST_SETTINGS],
        "the cost calculator (python -m loadtest.cost)",
    )
    folder = summary_path.parent
    cost = json.loads((REPO_ROOT / folder / "cost.json").read_text())
    print(capacity_line(summary, cost))
    print()
    for line in cost_headline((REPO_ROOT / folder / "cost.md").read_text()):
        print(line)
    print(
        f"\nFull cost report: {folder / 'cost.md'}\n"
        f"  chart  {folder / 'cost.png'}\n"
        f"  report {folder / 'cost.html'}  (chart and every table)\n"
        f"The same from the shell: make load && make cost"
    )
