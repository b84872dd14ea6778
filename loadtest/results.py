"""The raw per-request log and the exact statistics computed from it (summary.json).

Locust's own percentiles are bucketed (10 ms steps above 100 ms, 100 ms above 1 s …); SLO and cost
maths here use every recorded value, through common.stats.percentile (linear interpolation
between closest ranks, as numpy's default and `vllm bench serve`).
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.stats import percentile

from .summary import (
    AgentBlock,
    Capacity,
    Distribution,
    LoadInfo,
    LoadSummary,
    ModelBlock,
    PromptPrefix,
    RunsBlock,
    ScenarioBlock,
    SloBlock,
    Step,
    knee,
)

RAW_GLOB = "raw-*.jsonl"
STEPS_FILE = "steps.jsonl"
SUMMARY_FILE = "summary.json"
PERCENTILES = (50, 95, 99)


def distribution(values: Sequence[float]) -> dict[str, float | int | None]:
    if not values:
        return {"count": 0, "mean": None, **{f"p{p}": None for p in PERCENTILES}}
    return {
        "count": len(values),
        "mean": sum(values) / len(values),
        **{f"p{p}": percentile(values, p) for p in PERCENTILES},
    }


class RawLog:
    """One JSON line per request or run, one file per Locust process: --processes forks share
    a host, and containers of scaled workers writing to one volume often share a pid."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        host = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "host"
        self._file = (folder / f"raw-{host}-{os.getpid()}.jsonl").open("a", buffering=1)

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")

    def close(self) -> None:
        self._file.close()


def read_records(folder: Path) -> list[dict[str, Any]]:
    records = []
    for path in sorted(folder.glob(RAW_GLOB)):
        for line in path.read_text().splitlines():
            if line.strip():
                records.append(json.loads(line))
    return records


def read_steps(folder: Path) -> list[dict[str, Any]]:
    path = folder / STEPS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass(frozen=True)
class Slo:
    ttft_p99_ms: float
    itl_p99_ms: float
    run_p95_ms: float
    max_error_ratio: float = 0.0
    facade_run_p95_ms: float | None = None  # None: the agent runs' run_p95_ms

    @property
    def facade_run_ms(self) -> float:
        return self.run_p95_ms if self.facade_run_p95_ms is None else self.facade_run_p95_ms


def _rate(n: float, seconds: float) -> float:
    return n / seconds if seconds > 0 else 0.0


def _distribution(values: Sequence[float]) -> Distribution:
    return Distribution.model_validate(distribution(values))


def _model_block(records: list[dict[str, Any]], seconds: float, slo: Slo) -> ModelBlock:
    ok = [r for r in records if r["ok"]]
    gaps = [g for r in ok for g in r["itl_ms"]]
    out_tokens = sum(r["output_tokens"] for r in ok)
    in_tokens = sum(r["prompt_tokens"] for r in ok)
    # vLLM's goodput: requests that meet every per-request SLO (TTFT, and TPOT for the ITL one)
    good = [
        r
        for r in ok
        if r["ttft_ms"] <= slo.ttft_p99_ms
        and (r["tpot_ms"] is None or r["tpot_ms"] <= slo.itl_p99_ms)
    ]
    return ModelBlock(
        requests=len(records),
        errors=len(records) - len(ok),
        requests_per_s=_rate(len(ok), seconds),
        input_tokens=in_tokens,
        output_tokens=out_tokens,
        input_tokens_per_s=_rate(in_tokens, seconds),
        output_tokens_per_s=_rate(out_tokens, seconds),
        ttft_ms=_distribution([r["ttft_ms"] for r in ok]),
        itl_ms=_distribution(gaps),
        tpot_ms=_distribution([r["tpot_ms"] for r in ok if r["tpot_ms"] is not None]),
        e2e_ms=_distribution([r["e2e_ms"] for r in ok]),
        goodput_per_s=_rate(len(good), seconds),
        slo_attainment=len(good) / len(records) if records else None,
    )


def _agent_block(records: list[dict[str, Any]], seconds: float, slo: Slo) -> AgentBlock:
    block = _runs_block(records, seconds, slo.run_p95_ms)
    ok = [r for r in records if r["ok"]]
    n = len(ok) or 1
    agent = AgentBlock(
        **{name: getattr(block, name) for name in block.model_fields_set},
        turns_per_run=sum(r["turns"] for r in ok) / n,
        tool_calls_per_run=sum(r["tool_calls"] for r in ok) / n,
        # absent from records of an older locustfile
        confirmations_per_run=sum(r.get("confirmations", 0) for r in ok) / n,
    )
    prefix = _prompt_prefix(ok)
    # absent, not null, without records: a summary reads back as it was written
    return agent if prefix is None else agent.model_copy(update={"prompt_prefix": prefix})


def _prompt_prefix(ok: list[dict[str, Any]]) -> PromptPrefix | None:
    """The repeated prefix of every model call of the step's runs (PromptPrefix)."""
    recorded = [r for r in ok if r.get("call_prompt_tokens")]
    if not recorded:
        return None  # records of an older locustfile, or no run finished
    prompt = repeated = calls = 0
    for r in recorded:
        sent: list[int] = r["call_prompt_tokens"]
        calls += len(sent)
        prompt += sum(sent)
        repeated += max(0, sent[0] - r.get("request_tokens", 0)) + sum(sent[:-1])
    return PromptPrefix(
        runs=len(recorded), calls=calls, prompt_tokens=prompt, repeated_tokens=repeated
    )


def _facade_block(records: list[dict[str, Any]], seconds: float, slo: Slo) -> RunsBlock:
    """Agent runs as an OpenAI client sees them through the loop's chat-completions facade."""
    return _runs_block(records, seconds, slo.facade_run_ms)


def working_ms(record: dict[str, Any]) -> float:
    """A run's time less the client's between each question arriving and its answer going out:
    the time the SLO judges (a record of an older locustfile has no such wait)."""
    return float(record["run_ms"] - (record.get("confirmation_wait_ms") or 0.0))


def _runs_block(records: list[dict[str, Any]], seconds: float, run_slo_ms: float) -> RunsBlock:
    """What agent and facade runs share: throughput, tokens, latencies, goodput, scenario mix."""
    ok = [r for r in records if r["ok"]]
    n = len(ok) or 1
    in_tokens = sum(r["prompt_tokens"] for r in ok)
    out_tokens = sum(r["output_tokens"] for r in ok)
    good = [r for r in ok if working_ms(r) <= run_slo_ms]
    # wall time only where it differs: a step whose runs never waited has one figure, and its
    # summary reads as it did before the working time
    wall = {"run_wall_ms": _distribution([r["run_ms"] for r in ok])} if _waited(ok) else {}
    return RunsBlock(
        runs=len(records),
        errors=len(records) - len(ok),
        runs_per_s=_rate(len(ok), seconds),
        input_tokens=in_tokens,
        output_tokens=out_tokens,
        input_tokens_per_s=_rate(in_tokens, seconds),
        output_tokens_per_s=_rate(out_tokens, seconds),
        prompt_tokens_per_run=in_tokens / n,
        output_tokens_per_run=out_tokens / n,
        first_answer_ms=_distribution(
            [r["first_answer_ms"] for r in ok if r["first_answer_ms"] is not None]
        ),
        run_ms=_distribution([working_ms(r) for r in ok]),
        goodput_per_s=_rate(len(good), seconds),
        slo_attainment=len(good) / len(records) if records else None,
        scenarios=_scenarios(records),
        **wall,
    )


def _waited(records: list[dict[str, Any]]) -> bool:
    return any(r.get("confirmation_wait_ms") for r in records)


def _mean(records: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in records if isinstance(r.get(key), int | float)]
    return sum(values) / len(values) if values else None


def _scenarios(records: list[dict[str, Any]]) -> dict[str, ScenarioBlock]:
    """Per scenario, what its runs did: a write scenario that takes 2 turns and asks no
    confirmation found nothing to write. (The facade's runs carry tokens only.)"""
    names = sorted({r["name"] for r in records})
    blocks = {}
    for name in names:
        runs = [r for r in records if r["name"] == name]
        ok = [r for r in runs if r["ok"]]
        tools: dict[str, int] = {}
        for r in ok:
            for tool in r.get("tools") or []:
                tools[tool] = tools.get(tool, 0) + 1
        blocks[name] = ScenarioBlock(
            runs=len(runs),
            errors=len(runs) - len(ok),
            turns_per_run=_mean(ok, "turns"),
            tool_calls_per_run=_mean(ok, "tool_calls"),
            tool_errors_per_run=_mean(ok, "tool_errors"),
            confirmations_per_run=_mean(ok, "confirmations"),
            tools=tools,  # how often each tool was called, over the scenario's runs
            prompt_tokens_per_run=_mean(ok, "prompt_tokens"),
            output_tokens_per_run=_mean(ok, "output_tokens"),
            run_ms_p95=percentile([working_ms(r) for r in ok], 95) if ok else None,
        )
    return blocks


def _ms(value: float | None) -> str:
    return "none measured" if value is None else f"{value:.1f} ms"


def _slo_verdict(
    model: ModelBlock | None,
    agent: AgentBlock | None,
    facade: RunsBlock | None,
    error_ratio: float,
    slo: Slo,
) -> tuple[bool, list[str]]:
    broken = []
    total = (
        (model.requests if model else 0)
        + (agent.runs if agent else 0)
        + (facade.runs if facade else 0)
    )
    if not total:
        return False, ["no requests"]
    if error_ratio > slo.max_error_ratio:
        broken.append(f"error ratio {error_ratio:.3f} > {slo.max_error_ratio}")
    if model and model.requests:
        ttft, itl = model.ttft_ms.p99, model.itl_ms.p99
        if ttft is None or ttft > slo.ttft_p99_ms:
            broken.append(f"TTFT p99 {_ms(ttft)} > {slo.ttft_p99_ms}")
        if itl is not None and itl > slo.itl_p99_ms:
            broken.append(f"ITL p99 {itl:.1f} ms > {slo.itl_p99_ms}")
    if agent and agent.runs:
        run = agent.run_ms.p95
        if run is None or run > slo.run_p95_ms:
            broken.append(f"run latency p95 {_ms(run)} > {slo.run_p95_ms}")
    if facade and facade.runs:
        run = facade.run_ms.p95
        if run is None or run > slo.facade_run_ms:
            broken.append(f"facade run latency p95 {_ms(run)} > {slo.facade_run_ms}")
    return not broken, broken


def summary_of(
    records: Iterable[dict[str, Any]], steps: list[dict[str, Any]], slo: Slo
) -> LoadSummary:
    """One block per step (a request belongs to the step it started in); capacity at the SLO."""
    records = sorted(records, key=lambda r: r["start"])
    if not steps:
        first = records[0]["start"] if records else 0.0
        steps = [{"step": 0, "users": None, "start": first}]
    last_end = max((r["end"] for r in records), default=steps[-1]["start"])
    summaries = []
    for i, step in enumerate(steps):
        start = step["start"]
        end = steps[i + 1]["start"] if i + 1 < len(steps) else max(last_end, start)
        inside = [
            r for r in records if start <= r["start"] < end or (i == 0 and r["start"] < start)
        ]
        seconds = end - start
        model = [r for r in inside if r["kind"] == "model"]
        agent = [r for r in inside if r["kind"] == "agent"]
        facade = [r for r in inside if r["kind"] == "facade"]
        model_block = _model_block(model, seconds, slo) if model else None
        agent_block = _agent_block(agent, seconds, slo) if agent else None
        facade_block = _facade_block(facade, seconds, slo) if facade else None
        errors = sum(1 for r in inside if not r["ok"])
        error_ratio = errors / len(inside) if inside else 0.0
        met, broken = _slo_verdict(model_block, agent_block, facade_block, error_ratio, slo)
        summaries.append(
            Step(
                step=step["step"],
                phase=step.get("phase"),  # the spike shape's baseline, spike and recovery
                users=step.get("users"),
                start=start,
                end=end,
                seconds=seconds,
                model=model_block,
                agent=agent_block,
                facade=facade_block,
                errors=errors,
                error_ratio=error_ratio,
                error_examples=sorted({r["error"] for r in inside if r.get("error")})[:5],
                slo_met=met,
                slo_broken=broken,
            )
        )
    capacity = knee(summaries)
    return LoadSummary(
        slo=SloBlock(
            ttft_p99_ms=slo.ttft_p99_ms,
            itl_p99_ms=slo.itl_p99_ms,
            run_p95_ms=slo.run_p95_ms,
            facade_run_p95_ms=slo.facade_run_ms,
            max_error_ratio=slo.max_error_ratio,
        ),
        percentile_method="exact, linear interpolation between closest ranks (numpy default)",
        steps=summaries,
        capacity_at_slo=None if capacity is None else _capacity(capacity),
    )


def summarise(
    records: Iterable[dict[str, Any]], steps: list[dict[str, Any]], slo: Slo
) -> dict[str, Any]:
    """summary_of as summary.json holds it (plain JSON), before what write_summary adds."""
    return summary_of(records, steps, slo).as_json()


def _capacity(step: Step) -> Capacity:
    """The figures the cost calculator reads: the highest step that met the SLO.

    Facade runs are counted apart from the agent users' runs (another client's view of the
    same work); their tokens are in the token rates, which are everything the model served."""
    model, agent, facade = step.model, step.agent, step.facade
    blocks = [b for b in (model, agent, facade) if b is not None]
    return Capacity(
        step=step.step,
        users=step.users,
        runs_per_s=agent.runs_per_s if agent else 0.0,
        facade_runs_per_s=facade.runs_per_s if facade else 0.0,
        model_requests_per_s=model.requests_per_s if model else 0.0,
        output_tokens_per_s=sum((b.output_tokens_per_s for b in blocks), 0.0),
        input_tokens_per_s=sum((b.input_tokens_per_s for b in blocks), 0.0),
        prompt_tokens_per_run=agent.prompt_tokens_per_run if agent else None,
        output_tokens_per_run=agent.output_tokens_per_run if agent else None,
    )


def step_missed_slo(folder: Path, slo: Slo) -> list[str]:
    """Why the newest step in `folder` so far misses the SLO (empty: it meets it, or nothing
    of it is logged here yet). Read while the step's last requests may still be running: the
    slowest are the missing ones, so a miss is a miss, and a step of workers whose logs are not
    in this folder is never judged on the silence."""
    steps = read_steps(folder)
    if not steps:
        return []
    newest = summary_of(read_records(folder), steps, slo).steps[-1]
    return [] if newest.slo_broken == ["no requests"] else newest.slo_broken


def write_summary(
    folder: Path,
    slo: Slo,
    prometheus_url: str = "off",
    backend: dict[str, Any] | None = None,
    load: LoadInfo | None = None,
) -> LoadSummary:
    """summary.json from the raw logs and steps in `folder`, with each step's Prometheus
    figures (LOAD_PROMETHEUS_URL's meaning: a URL, empty for make dev's, or off), what served
    the load (`backend`, loadtest.backend, completed with the GPUs from Prometheus) and how it
    was made (`load`: the users, shape and think time). What is written passes through
    LoadSummary, the model every reader reads it with."""
    from . import prometheus

    summary = summarise(read_records(folder), read_steps(folder), slo)
    if backend is not None:
        summary["backend"] = backend
    if load is not None:
        summary["load"] = load.as_json()
    prometheus.add_figures(summary, *prometheus.resolve(prometheus_url))
    written = LoadSummary.parse(summary, "the summary written")
    written.write(folder / SUMMARY_FILE)
    return written
