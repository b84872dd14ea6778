"""The suite's report: rates per scenario with their sample counts, in JSON for a machine to
compare and Markdown for a person; the gate that reads it."""

from __future__ import annotations

import datetime as dt
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from common.stats import percentile

from .runner import Sample
from .scenarios import SCENARIOS

THRESHOLDS = Path(__file__).with_name("thresholds.toml")


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


class Overall(BaseModel):
    samples: int
    unscored: int
    goal_rate: float | None
    untrue_rate: float | None
    refusals: int
    malformed: int


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


def scenario_row(name: str, samples: list[Sample]) -> ScenarioRow:
    scored = [s for s in samples if s.error is None]
    n = len(scored)

    def mean(values: list[float]) -> float | None:
        return sum(values) / n if n else None

    return ScenarioRow(
        scenario=name,
        probe=next(s.probe for s in SCENARIOS if s.name == name),
        samples=n,
        unscored=len(samples) - n,
        goal_rate=mean([float(s.goal) for s in scored]),
        untrue_rate=mean([float(bool(s.untrue)) for s in scored]),
        refusals_per_sample=mean([float(len(s.refusals)) for s in scored]),
        malformed_per_sample=mean([float(s.malformed) for s in scored]),
        turns_mean=mean([float(s.turns) for s in scored]),
        tokens_mean=mean([float(s.prompt_tokens + s.completion_tokens) for s in scored]),
        seconds_p50=percentile([s.seconds for s in scored], 50) if n else None,
    )


def build(samples: list[Sample], endpoint: Endpoint) -> GateReport:
    names = list(dict.fromkeys(s.scenario for s in samples))
    rows = [scenario_row(name, [s for s in samples if s.scenario == name]) for name in names]
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


def gate(
    report: GateReport, baseline: GateReport | None, thresholds: dict[str, Any]
) -> list[Finding]:
    """What fails the gate: a scenario under the floors, or worse than the baseline by more than
    the thresholds allow. Empty: it passes."""
    floors, allowed = thresholds["absolute"], thresholds["baseline"]
    found = []
    for row in report.scenarios:
        name = row.scenario
        if row.samples == 0 or row.goal_rate is None or row.untrue_rate is None:
            found.append(Finding(name, f"no sample could be scored ({row.unscored} failed)"))
            continue
        if row.goal_rate < floors["min_goal_rate"]:
            floor = floors["min_goal_rate"]
            said = f"goal reached in {row.goal_rate:.0%} of {row.samples} (floor {floor:.0%})"
            found.append(Finding(name, said))
        if row.untrue_rate > floors["max_untrue_rate"]:
            most = floors["max_untrue_rate"]
            said = f"untrue in {row.untrue_rate:.0%} of {row.samples} (at most {most:.0%})"
            found.append(Finding(name, said))
    if baseline is None:
        return found
    before = {row.scenario: row for row in baseline.scenarios}
    rises = (
        ("goal_rate", -1, "max_goal_rate_drop", "goal rate"),
        ("untrue_rate", 1, "max_untrue_rate_rise", "untrue rate"),
        ("refusals_per_sample", 1, "max_refusals_rise", "refusals per sample"),
        ("malformed_per_sample", 1, "max_malformed_rise", "malformed calls per sample"),
    )
    for row in report.scenarios:
        old = before.get(row.scenario)
        if old is None or not row.samples or not old.samples:
            continue
        for key, sign, limit, words in rises:
            new_value, old_value = getattr(row, key), getattr(old, key)
            worse = (new_value - old_value) * sign
            if worse > allowed[limit]:
                said = f"{words} {old_value:.2f} → {new_value:.2f} (allowed {allowed[limit]:.2f})"
                found.append(Finding(row.scenario, said))
    return found


def load_thresholds(path: Path) -> dict[str, Any]:
    with path.open("rb") as file:
        thresholds = tomllib.load(file)
    needed = {"absolute": ("min_goal_rate", "max_untrue_rate"),
              "baseline": ("max_goal_rate_drop", "max_untrue_rate_rise", "max_refusals_rise",
                           "max_malformed_rise")}  # fmt: skip
    missing = [f"{table}.{key}" for table, keys in needed.items() for key in keys
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
        f"{_rate(o.goal_rate)}, untrue answers {_rate(o.untrue_rate)}, "
        f"{o.refusals} refusals by the server, {o.malformed} malformed tool calls.",
        "",
        "| scenario | probe | samples | goal | untrue | refusals/sample | malformed/sample "
        "| turns | tokens | s p50 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report.scenarios:
        lines.append(
            f"| {r.scenario} | {'yes' if r.probe else ''} | {r.samples} "
            f"| {_rate(r.goal_rate)} | {_rate(r.untrue_rate)} "
            f"| {_num(r.refusals_per_sample)} | {_num(r.malformed_per_sample)} "
            f"| {_num(r.turns_mean)} | {_num(r.tokens_mean, 0)} | {_num(r.seconds_p50)} |"
        )
    lines += ["", "**Gate: passed.**" if not findings else "**Gate: failed.**"]
    lines += [f"- {finding}" for finding in findings]
    untrue = [s for s in report.samples if s.untrue]
    if untrue:
        lines += ["", "Untrue answers (the database shows no such change):"]
        lines += [f"- {s.scenario} #{s.sample}: {', '.join(s.untrue)} — "
                  f"“{s.answer[:120]}”" for s in untrue]  # fmt: skip
    return "\n".join(lines) + "\n"


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


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
