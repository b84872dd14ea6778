"""The measured inputs: capacity and tokens per request from a load test's summary.json, and the
two system prompts' lengths, counted with the stack's tokenizer rather than guessed."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from common import tokens

from ..results import SUMMARY_FILE
from ..summary import (
    Backend,
    Capacity,
    CapacityReading,
    LoadSummary,
    PromptPrefix,
    SloBlock,
    SummaryError,
    load_json,
    served_per_s,
)
from .settings import (
    MAX_CAPACITY_PER_S,
    MAX_TOKENS_PER_REQUEST,
    MIN_CAPACITY_PER_S,
    CalculatorSettings,
    Loaded,
    SettingError,
    Source,
)

# What results._capacity writes and every version of it wrote; a summary without them cannot
# be costed.
CAPACITY_FIELDS = tuple(
    name for name, field in Capacity.model_fields.items() if field.is_required()
)


@dataclass(frozen=True)
class SummaryFacts:
    """What the summary said that the report shows: where the capacity came from and how."""

    path: str
    step: int
    users: int | None
    slo: SloBlock
    basis: dict[str, str]  # figure → how the summary gave it
    capacity_basis: str
    lower_bound: bool
    backend: Backend | None
    # the capacity step's prompt records (None: an older summary, or model users only) and
    # vLLM's prefix-cache hit rate over it (None: not recorded, or no lookups)
    prompt_prefix: PromptPrefix | None = None
    prefix_cache_hit_rate: float | None = None

    def as_json(self) -> dict[str, Any]:
        """cost.json's `summary` block: the summary's own slo and backend blocks as it held
        them."""
        return {
            "path": self.path,
            "step": self.step,
            "users": self.users,
            "slo": self.slo.as_json(),
            "basis": self.basis,
            "capacity_basis": self.capacity_basis,
            "lower_bound": self.lower_bound,
            "backend": None if self.backend is None else self.backend.as_json(),
        }


@dataclass(frozen=True)
class Workload:
    """One request as the cost maths sees it, and what one replica serves at the SLO."""

    unit: str  # "agent run" or "model request"
    capacity_per_s: float  # requests/s per replica at the SLO
    input_tokens: float  # per request, with the fine-tune's short prompt
    output_tokens: float
    model_calls: float  # model calls per request; each one resends the system prompt
    sources: dict[str, str] = field(default_factory=dict)  # figure → where it came from
    warnings: tuple[str, ...] = ()
    summary: SummaryFacts | None = None  # what the summary said, for the report
    given: frozenset[str] = frozenset()  # the figures a setting gave instead of the summary


@dataclass(frozen=True)
class PromptTokens:
    finetune: float  # the loop's trained three sentences
    api: float  # the full rules and few-shot examples a general model needs
    api_file: str  # as the setting gave it; "" when the API gets the fine-tune's prompt

    @property
    def extra_per_call(self) -> float:
        return self.api - self.finetune


def newest_summary(results_dir: Path) -> Path | None:
    """The newest `make load` result: its folders are named by start time (YYYYmmdd-HHMMSS)."""
    found = sorted(results_dir.glob(f"*/{SUMMARY_FILE}"), key=lambda p: p.parent.name)
    return found[-1] if found else None


def read_summary(path: Path) -> LoadSummary:
    """The summary as its model reads it, once it has the capacity the calculator needs."""
    try:
        data = load_json(path)
    except SummaryError as error:
        raise SettingError(f"SUMMARY: {error}") from None
    if not isinstance(data, dict) or "capacity_at_slo" not in data:
        raise SettingError(
            f"SUMMARY: {path} has no capacity_at_slo (not a summary.json of python -m loadtest)"
        )
    capacity = data["capacity_at_slo"]
    if capacity is None:
        raise SettingError(
            f"SUMMARY: {path}: capacity_at_slo is null: no step met the SLO, so there is no "
            "capacity to cost (load lighter, or set capacity_requests_per_s)"
        )
    if not isinstance(capacity, dict):
        raise SettingError(f"SUMMARY: {path}: capacity_at_slo is not an object")
    missing = [name for name in CAPACITY_FIELDS if name not in capacity]
    if missing:
        raise SettingError(
            f"SUMMARY: {path}: capacity_at_slo lacks {', '.join(missing)} "
            "(written by an older python -m loadtest?)"
        )
    try:
        return LoadSummary.parse(data, path)
    except SummaryError as error:
        raise SettingError(f"SUMMARY: {error}") from None


def _number(capacity: Capacity, name: str, path: Path) -> float:
    value = getattr(capacity, name)
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise SettingError(f"SUMMARY: {path}: capacity_at_slo.{name} is not a number: {value!r}")
    if value < 0:
        raise SettingError(f"SUMMARY: {path}: capacity_at_slo.{name} is negative: {value!r}")
    return float(value)


def workload(summary_path: Path | None, loaded: Loaded) -> Workload:
    """The request's figures: the summary's capacity step, each overridden by a setting."""
    s, sources = loaded.settings, loaded.sources
    explicit = {
        "capacity_per_s": s.capacity_requests_per_s,
        "input_tokens": s.input_tokens_per_request,
        "output_tokens": s.output_tokens_per_request,
        "model_calls": s.model_calls_per_request,
    }
    setting_of = {
        "capacity_per_s": "capacity_requests_per_s",
        "input_tokens": "input_tokens_per_request",
        "output_tokens": "output_tokens_per_request",
        "model_calls": "model_calls_per_request",
    }
    if summary_path is None:
        needed = [setting_of[k] for k in ("capacity_per_s", "input_tokens", "output_tokens")]
        unset = [name for name in needed if getattr(s, name) is None]
        if unset:
            raise SettingError(
                "SUMMARY: no summary.json given or found, and "
                f"{', '.join(unset)} not set (give one or the other)"
            )
        measured: dict[str, float] = {"model_calls": 1.0}
        notes: list[tuple[str, str]] = []
        unit, facts = "request", None
        origin = {"model_calls": "one model call per request (default)"}
    else:
        measured, unit, notes, facts = _from_summary(
            read_summary(summary_path), summary_path, s, sources["capacity_basis"].setting
        )
        origin = {name: f"summary.json, {facts.basis[name]}" for name in measured}
        replicas = served_replicas(facts)
        if replicas > 1:  # the step's load went to every replica: one of them is the unit
            measured["capacity_per_s"] /= replicas
            origin["capacity_per_s"] += f", ÷ {replicas} replicas that served it"
    values: dict[str, float] = {}
    where: dict[str, str] = {}
    for name, value in explicit.items():
        if value is not None:
            values[name] = value
            where[name] = sources[setting_of[name]].origin
        else:
            values[name] = measured[name]
            where[name] = origin[name]
    if values["input_tokens"] + values["output_tokens"] <= 0:
        raise SettingError(
            f"{sources['input_tokens_per_request'].setting}: a request of no tokens costs "
            "nothing at an API: set input_tokens_per_request or output_tokens_per_request"
        )
    if values["capacity_per_s"] <= 0:
        raise SettingError(
            f"SUMMARY: {summary_path}: the capacity step served no requests "
            "(set capacity_requests_per_s)"
        )
    for name, low, high in (
        ("capacity_per_s", MIN_CAPACITY_PER_S, MAX_CAPACITY_PER_S),
        ("input_tokens", 0, MAX_TOKENS_PER_REQUEST),
        ("output_tokens", 0, MAX_TOKENS_PER_REQUEST),
    ):
        if not low <= values[name] <= high:
            raise SettingError(
                f"SUMMARY: {summary_path}: {name.replace('_', ' ')} {values[name]:.3g} is "
                f"outside the sane range {low:g} to {high:g} (set {setting_of[name]})"
            )
    return Workload(
        unit=unit,
        capacity_per_s=values["capacity_per_s"],
        input_tokens=values["input_tokens"],
        output_tokens=values["output_tokens"],
        model_calls=values["model_calls"],
        sources=where,
        # a caveat about a figure the settings replaced no longer applies
        warnings=tuple(note for name, note in notes if explicit[name] is None),
        summary=facts,
        given=frozenset(name for name, value in explicit.items() if value is not None),
    )


def _from_summary(
    summary: LoadSummary, path: Path, s: CalculatorSettings, setting: str
) -> tuple[dict[str, float], str, list[tuple[str, str]], SummaryFacts]:
    """The request's figures from the capacity step; `setting` names capacity_basis as the
    user gave it (a flag, a variable, a file key), for a basis this summary cannot support."""
    capacity = summary.capacity_at_slo
    if capacity is None:  # read_summary refuses it
        raise SettingError(f"SUMMARY: {path}: capacity_at_slo is null")
    runs = _number(capacity, "runs_per_s", path)
    requests = _number(capacity, "model_requests_per_s", path)
    # 0 in summaries written before the facade user existed
    facade = _number(capacity, "facade_runs_per_s", path)
    tokens_in = _number(capacity, "input_tokens_per_s", path)
    tokens_out = _number(capacity, "output_tokens_per_s", path)
    step = summary.step_of(capacity.step)
    where = f"step {capacity.step} ({capacity.users} users)"
    notes: list[tuple[str, str]] = []  # (figure, a caveat about its value)
    basis: dict[str, str] = {}
    others = [
        f"{n:.3g} {what}/s"
        for n, what in ((requests, "raw model requests"), (facade, "facade runs"))
        if n > 0
    ]
    if runs > 0:
        # A request is one agent run: the unit a user of the copilot asks for and pays for.
        unit = "agent run"
        per_run_in = _number(capacity, "prompt_tokens_per_run", path)
        per_run_out = _number(capacity, "output_tokens_per_run", path)
        agent = step.agent if step else None
        calls = agent.turns_per_run if agent else None
        basis["model_calls"] = "turns per run of the capacity step"
        if calls is None or calls < 1:
            calls = 1.0
            basis["model_calls"] = "assumed: the summary has no turns per run"
            notes.append(("model_calls", "the summary has no turns per run: one call assumed"))
        chosen: str = s.capacity_basis
        if chosen == "auto":
            # runs/s is the capacity itself only when nothing else shared the step
            chosen = "tokens" if others else "runs"
            if others:
                notes.append(
                    (
                        "capacity_per_s",
                        f"{' and '.join(others)} shared the capacity step with the agent runs, "
                        "so capacity_basis auto counts every token it served as agent-run work "
                        "(tokens); load with agent users only for runs/s itself",
                    )
                )
        if chosen == "runs":
            if others:
                raise SettingError(
                    f"{setting}: runs needs a capacity step of agent runs only, but {where} of "
                    f"{path} also served {' and '.join(others)} besides {runs:.3g} runs/s, so "
                    "its runs/s understates a replica: use auto or tokens, or load with agent "
                    "users only (--user-classes agent)"
                )
            capacity_per_s = runs
            basis["capacity_per_s"] = f"runs/s of {where}, agent users only"
        elif chosen == "tokens":
            per_run = per_run_in + per_run_out
            capacity_per_s = (tokens_in + tokens_out) / per_run if per_run else 0.0
            shared = f", shared with {' and '.join(others)}" if others else ""
            basis["capacity_per_s"] = (
                f"all {tokens_in + tokens_out:,.0f} tokens/s of {where}{shared} ÷ "
                f"{per_run:,.0f} tokens per run ({runs:.3g} runs/s were agent runs)"
            )
        else:
            capacity_per_s = tokens_out / per_run_out if per_run_out else 0.0
            shared = f", shared with {' and '.join(others)}" if others else ""
            basis["capacity_per_s"] = (
                f"{tokens_out:,.0f} output tokens/s of {where}{shared} ÷ {per_run_out:,.0f} "
                f"output tokens per run ({runs:.3g} runs/s were agent runs)"
            )
        measured = {
            "capacity_per_s": capacity_per_s,
            "input_tokens": per_run_in,
            "output_tokens": per_run_out,
            "model_calls": float(calls),
        }
        basis |= {"input_tokens": "prompt tokens per run", "output_tokens": "output tokens per run"}
    elif requests > 0:
        if s.capacity_basis == "runs":
            raise SettingError(
                f"{setting}: runs needs agent runs, and {where} of {path} served none (model "
                "users only): use auto, which costs per model request"
            )
        chosen = "requests"
        unit = "model request"
        measured = {
            "capacity_per_s": requests,
            "input_tokens": tokens_in / requests,
            "output_tokens": tokens_out / requests,
            "model_calls": 1.0,
        }
        basis = {
            "capacity_per_s": f"model requests/s of {where}, model users only",
            "input_tokens": "input tokens/s ÷ requests/s",
            "output_tokens": "output tokens/s ÷ requests/s",
            "model_calls": "one call per model request",
        }
        if facade > 0:
            basis["capacity_per_s"] = f"model requests/s of {where}, shared with facade runs"
    else:
        raise SettingError(
            f"SUMMARY: {path}: capacity_at_slo has no runs or model requests per second"
        )
    reading, shown_by = summary.capacity_reading()
    lower_bound = reading is CapacityReading.LOWER_BOUND
    if lower_bound and len(summary.steps) == 1:
        notes.append(
            (
                "capacity_per_s",
                f"the sweep had one step ({capacity.users} users): one step cannot show where "
                "a replica saturates, so its capacity is at least this; sweep several user "
                "counts (LOAD_SHAPE=steps, LOAD_STEPS ≥ 3) to find the knee",
            )
        )
    elif lower_bound:
        notes.append(
            (
                "capacity_per_s",
                f"the highest step tested ({capacity.users} users) still met the SLO and served "
                "the most, so a replica's real capacity is at least this: add steps with more "
                "users until one misses the SLO or serves less",
            )
        )
    elif reading is CapacityReading.SATURATED and shown_by is not None:
        notes.append(
            (
                "capacity_per_s",
                f"the replica was saturated: {shown_by.users} users were served "
                f"{served_per_s(shown_by):.2f}/s, no more than the {capacity.users} users' "
                f"{served_per_s(summary.step_of(capacity.step) or shown_by):.2f}/s, so the "
                f"capacity is the {capacity.users} users' step",
            )
        )
    facts = SummaryFacts(
        path=str(path),
        step=capacity.step,
        users=capacity.users,
        slo=summary.slo,
        basis=basis,
        capacity_basis=chosen,
        lower_bound=lower_bound,
        backend=summary.backend,
        prompt_prefix=step.agent.prompt_prefix if step and step.agent and unit == "agent run"
        else None,
        prefix_cache_hit_rate=step.prometheus.prefix_cache_hit_rate
        if step and step.prometheus else None,
    )  # fmt: skip
    return measured, unit, notes, facts


def served_replicas(facts: SummaryFacts | None) -> int:
    """How many replicas served the load test, as its summary recorded them (1 if it did not
    say: a summary from before replicas were counted, or a Prometheus without them)."""
    replicas = facts.backend.replicas if facts and facts.backend else None
    return replicas if replicas is not None and replicas >= 1 else 1


def gpus_per_replica(facts: SummaryFacts | None) -> int | None:
    """The GPUs each replica of the load test served on (DCGM, via its summary), if known."""
    gpus = facts.backend.gpus_per_replica if facts and facts.backend else None
    return gpus if gpus is not None and gpus >= 1 else None


def measured_gpu_count(loaded: Loaded, work: Workload) -> Loaded:
    """`gpu_count` as the load test measured it (GPUs per replica, from DCGM), unless a
    setting gave it: the staircase is then in the GPUs a replica really takes."""
    gpus = gpus_per_replica(work.summary)
    if gpus is None or loaded.sources["gpu_count"].kind != "default":
        return loaded
    settings = loaded.settings.model_copy(update={"gpu_count": gpus})
    origin = f"summary.json: {gpus} GPU(s) per replica, from DCGM's series"
    sources = {**loaded.sources, "gpu_count": Source("summary", "gpu_count", origin)}
    return replace(loaded, settings=settings, sources=sources)


def prompt_tokens(loaded: Loaded) -> PromptTokens:
    """Both system prompts as one chat message each, counted as the loop and simulator count."""
    from loop.engine import LoopConfig
    from loop.settings import LoopSettings

    # The loop's default prompt (LOOP_SYSTEM_PROMPT), the one the fine-tune was trained with;
    # read from the settings field because the constant's home module may move.
    trained = LoopSettings.model_fields["system_prompt"].default
    if not isinstance(trained, str):
        raise TypeError("LoopSettings.system_prompt has no default text")
    # With the date line the loop adds by default (LOOP_DATE_IN_PROMPT): the fine-tune reads
    # it, and an API model would need it as much, so both prompts carry it.
    dated = LoopSettings.model_fields["date_in_prompt"].default

    def as_sent(text: str) -> int:
        if dated:
            text = LoopConfig(system_prompt=text, today=dt.date.today).prompt()
        return tokens.message_tokens({"role": "system", "content": text})

    finetune = as_sent(trained)
    path = loaded.api_prompt_path
    if path is None:
        return PromptTokens(finetune, finetune, "")
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        setting = loaded.sources["api_system_prompt_file"].setting
        raise SettingError(f"{setting}: cannot read {path}: {error}") from None
    return PromptTokens(finetune, as_sent(text), loaded.settings.api_system_prompt_file)
