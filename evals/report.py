"""The suite's report: rates per scenario with their sample counts, in JSON for a machine to
compare and Markdown for a person; the gate that reads it."""

from __future__ import annotations

import datetime as dt
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from common.stats import percentile

from .malformed import breakdown
from .runner import Sample
from .scenarios import Scenario

THRESHOLDS = Path(__file__).with_name("thresholds.toml")
# What a thresholds file must hold (the tables and their keys).
NEEDED = {
    "absolute": ("min_goal_rate", "max_untrue_rate", "max_refusals_per_sample",
                 "max_refusals_per_sample_probe", "max_malformed_per_sample", "max_turns_p95",
                 "max_tokens_p95", "max_seconds_p95"),
    "baseline": ("max_goal_rate_drop", "max_untrue_rate_rise", "max_refusals_rise",
                 "max_malformed_rise", "max_turns_p95_rise", "max_tokens_p95_rise",
                 "max_seconds_p95_rise"),
}  # fmt: skip


class ScenarioRow(BaseModel):
    scenario: str
    probe: bool
    samples: int  # scored
    unscored: int
    # None when no sample could be scored
    goal_rate: float | None
    untrue_rate: float | None
    refusals_per_sample: float | None
    malformed_per_sample: float | None
    turns_mean: float | None
    tokens_mean: float | None
    seconds_p50: float | None
    # what it is about (older reports have none of these)
    what: str = ""
    tool: str = ""
    role: str = ""
    phrasing: str = ""
    source: str = "built-in"
    goals: int | None = None  # samples that reached the goal
    untrue: int | None = None  # samples with an untrue answer
    turns_p95: float | None = None
    tokens_p95: float | None = None
    seconds_p95: float | None = None


class Overall(BaseModel):
    samples: int
    unscored: int
    goal_rate: float | None
    untrue_rate: float | None
    refusals: int
    malformed: int
    goals: int | None = None
    untrue: int | None = None
    # "tool.argument: how" → how many, over every sample
    malformed_by_kind: dict[str, int] = {}


class Endpoint(BaseModel):
    """The model endpoint the suite ran against."""

    url: str
    model: str | None = None
    served_by: str | None = None
    version: str | None = None


class Verdict(BaseModel):
    passed: bool
    findings: list[str]


class GateReport(BaseModel):
    """report.json: what the gate writes, and reads back as a baseline."""

    made_at: str
    endpoint: Endpoint
    overall: Overall
    scenarios: list[ScenarioRow]
    samples: list[Sample]
    gate: Verdict | None = None  # written with the report


def scenario_row(scenario: Scenario, samples: list[Sample]) -> ScenarioRow:
    scored = [s for s in samples if s.error is None]
    n = len(scored)

    def mean(values: list[float]) -> float | None:
        return sum(values) / n if n else None

    def p95(values: list[float]) -> float | None:
        return percentile(values, 95) if n else None

    tokens = [float(s.prompt_tokens + s.completion_tokens) for s in scored]
    return ScenarioRow(
        scenario=scenario.name,
        probe=scenario.probe,
        samples=n,
        unscored=len(samples) - n,
        goal_rate=mean([float(s.goal) for s in scored]),
        untrue_rate=mean([float(bool(s.untrue)) for s in scored]),
        refusals_per_sample=mean([float(len(s.refusals)) for s in scored]),
        malformed_per_sample=mean([float(s.malformed) for s in scored]),
        turns_mean=mean([float(s.turns) for s in scored]),
        tokens_mean=mean(tokens),
        seconds_p50=percentile([s.seconds for s in scored], 50) if n else None,
        what=scenario.what,
        tool=scenario.tool,
        role=scenario.role,
        phrasing=scenario.phrasing,
        source=scenario.source,
        goals=sum(s.goal for s in scored),
        untrue=sum(bool(s.untrue) for s in scored),
        turns_p95=p95([float(s.turns) for s in scored]),
        tokens_p95=p95(tokens),
        seconds_p95=p95([s.seconds for s in scored]),
    )


def build(samples: list[Sample], endpoint: Endpoint, scenarios: Sequence[Scenario]) -> GateReport:
    ran = {s.scenario for s in samples}
    rows = [
        scenario_row(sc, [s for s in samples if s.scenario == sc.name])
        for sc in scenarios
        if sc.name in ran
    ]
    scored = [s for s in samples if s.error is None]
    n = len(scored)
    return GateReport(
        made_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        endpoint=endpoint,
        overall=Overall(
            samples=n,
            unscored=len(samples) - n,
            goal_rate=sum(s.goal for s in scored) / n if n else None,
            untrue_rate=sum(bool(s.untrue) for s in scored) / n if n else None,
            refusals=sum(len(s.refusals) for s in scored),
            malformed=sum(s.malformed for s in scored),
            goals=sum(s.goal for s in scored),
            untrue=sum(bool(s.untrue) for s in scored),
            malformed_by_kind=breakdown([c for s in scored for c in s.malformed_calls]),
        ),
        scenarios=rows,
        samples=samples,
    )


@dataclass(frozen=True)
class Finding:
    scenario: str
    what: str

    def __str__(self) -> str:
        return f"{self.scenario}: {self.what}"


def counted(count: int | None, samples: int, rate: float | None) -> str:
    """ "4/5 (80 %)": a rate with what it is a rate of."""
    if rate is None:
        return "—"
    count = round(rate * samples) if count is None else count
    return f"{count}/{samples} ({rate:.0%})".replace("%)", " %)")


def gate(
    report: GateReport, baseline: GateReport | None, thresholds: dict[str, Any]
) -> list[Finding]:
    """What fails the gate: a scenario under the floors, or worse than the baseline by more than
    the thresholds allow. Empty: it passes."""
    floors, allowed = thresholds["absolute"], thresholds["baseline"]
    found = []
    for row in report.scenarios:
        name, n = row.scenario, row.samples
        if n == 0 or row.goal_rate is None or row.untrue_rate is None:
            found.append(Finding(name, f"no sample could be scored ({row.unscored} failed)"))
            continue
        if row.goal_rate < floors["min_goal_rate"]:
            floor = floors["min_goal_rate"]
            said = f"goal reached in {counted(row.goals, n, row.goal_rate)} (floor {floor:.0%})"
            found.append(Finding(name, said))
        if row.untrue_rate > floors["max_untrue_rate"]:
            most = floors["max_untrue_rate"]
            said = f"untrue in {counted(row.untrue, n, row.untrue_rate)} (at most {most:.0%})"
            found.append(Finding(name, said))
        refusals = floors[
            "max_refusals_per_sample_probe" if row.probe else "max_refusals_per_sample"
        ]
        ceilings = (
            ("refusals per sample", row.refusals_per_sample, refusals),
            ("malformed calls per sample", row.malformed_per_sample,
             floors["max_malformed_per_sample"]),
            ("p95 turns", row.turns_p95, floors["max_turns_p95"]),
            ("p95 tokens", row.tokens_p95, floors["max_tokens_p95"]),
            ("p95 seconds", row.seconds_p95, floors["max_seconds_p95"]),
        )  # fmt: skip
        for words, value, most in ceilings:
            if value is not None and value > most:
                found.append(Finding(name, f"{words} {value:.2f} over {most:g} (of {n})"))
    if baseline is None:
        return found
    before = {row.scenario: row for row in baseline.scenarios}
    rises = (
        ("goal_rate", -1, "max_goal_rate_drop", "goal rate", False),
        ("untrue_rate", 1, "max_untrue_rate_rise", "untrue rate", False),
        ("refusals_per_sample", 1, "max_refusals_rise", "refusals per sample", False),
        ("malformed_per_sample", 1, "max_malformed_rise", "malformed calls per sample", False),
        ("turns_p95", 1, "max_turns_p95_rise", "p95 turns", False),
        # tokens and seconds: a share of the baseline's (a bigger prompt, a slower host)
        ("tokens_p95", 1, "max_tokens_p95_rise", "p95 tokens", True),
        ("seconds_p95", 1, "max_seconds_p95_rise", "p95 seconds", True),
    )
    for row in report.scenarios:
        old = before.get(row.scenario)
        if old is None or not row.samples or not old.samples:
            continue
        for key, sign, limit, words, relative in rises:
            new_value, old_value = getattr(row, key), getattr(old, key)
            if new_value is None or old_value is None:  # a baseline from before it was kept
                continue
            worse = (new_value - old_value) * sign
            if relative:
                worse = worse / old_value if old_value else 0.0
            if worse > allowed[limit]:
                said = f"{words} {old_value:.2f} → {new_value:.2f} (allowed {allowed[limit]:.2f}"
                found.append(Finding(row.scenario, said + (" of it)" if relative else ")")))
    return found


def load_thresholds(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as file:
            thresholds = tomllib.load(file)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path}: {error}") from None
    missing = [f"{table}.{key}" for table, keys in NEEDED.items() for key in keys
               if key not in thresholds.get(table, {})]  # fmt: skip
    if missing:
        raise ValueError(f"{path}: missing {', '.join(missing)}")
    return thresholds


def markdown(report: GateReport, findings: list[Finding]) -> str:
    o, endpoint = report.overall, report.endpoint
    lines = [
        f"# Release gate: {endpoint.model or '?'} at {endpoint.url}",
        "",
        f"{report.made_at}; served by {endpoint.served_by or '?'}; "
        f"{o.samples} samples scored ({o.unscored} could not be run); goal reached "
        f"{counted(o.goals, o.samples, o.goal_rate)}, untrue answers "
        f"{counted(o.untrue, o.samples, o.untrue_rate)}, "
        f"{o.refusals} refusals by the server, {o.malformed} malformed tool calls.",
        "",
        "| scenario | tool | role | phrasing | probe | goal | untrue | refusals/sample "
        "| malformed/sample | turns p95 | tokens p95 | s p95 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report.scenarios:
        lines.append(
            f"| {r.scenario} | {r.tool} | {r.role} | {r.phrasing} | {'yes' if r.probe else ''} "
            f"| {counted(r.goals, r.samples, r.goal_rate)} "
            f"| {counted(r.untrue, r.samples, r.untrue_rate)} "
            f"| {_num(r.refusals_per_sample)} | {_num(r.malformed_per_sample)} "
            f"| {_num(r.turns_p95, 1)} | {_num(r.tokens_p95, 0)} | {_num(r.seconds_p95)} |"
        )
    lines += _by_tool(report)
    lines += ["", "**Gate: passed.**" if not findings else "**Gate: failed.**"]
    lines += [f"- {finding}" for finding in findings]
    failing = [s for s in report.samples if s.failed]
    if failing:
        lines += ["", "Failing samples:"]
        for s in failing:
            said = [] if s.goal else [f"goal missed ({s.status})"]
            said += [f"untrue: {', '.join(s.untrue)}"] if s.untrue else []
            said += [f"malformed {call}" for call in s.malformed_calls]
            lines.append(f"- {s.scenario} #{s.sample}: {'; '.join(said)} — “{s.answer[:120]}”")
    if o.malformed_by_kind:
        lines += ["", "Malformed tool calls by tool, argument and how:"]
        lines += [f"- {kind}: {count}" for kind, count in o.malformed_by_kind.items()]
    return "\n".join(lines) + "\n"


def _by_tool(report: GateReport) -> list[str]:
    """Goals by the tool a scenario is about and the role that asks."""
    groups: dict[tuple[str, str], list[ScenarioRow]] = {}
    for row in report.scenarios:
        groups.setdefault((row.tool or "?", row.role or "?"), []).append(row)
    lines = ["", "| tool | role | scenarios | goal |", "|---|---|---|---|"]
    for (tool, role), rows in sorted(groups.items()):
        samples = sum(r.samples for r in rows)
        goals = sum(r.goals or 0 for r in rows)
        rate = goals / samples if samples else None
        lines.append(f"| {tool} | {role} | {len(rows)} | {counted(goals, samples, rate)} |")
    return lines


def _num(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def write(report: GateReport, findings: list[Finding], folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    verdict = Verdict(passed=not findings, findings=[str(f) for f in findings])
    report = report.model_copy(update={"gate": verdict})
    as_json, as_md = folder / "report.json", folder / "report.md"
    as_json.write_text(report.model_dump_json(indent=2) + "\n")
    as_md.write_text(markdown(report, findings))
    return as_json, as_md
