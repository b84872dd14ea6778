"""summary.json as one model: what `python -m loadtest` writes (loadtest.results) and what every
reader takes from it (the cost calculator, the demo's sweep, make bench-router, the tests).

The writer builds these models and writes `LoadSummary.as_json()`; a reader calls
`LoadSummary.read(path)`. A field a later version of the writer added has a default that says
what an older file meant by leaving it out, so a summary from any earlier version still reads:

- the facade user (25dee20): `Step.facade`, `SloBlock.facade_run_p95_ms`,
  `Capacity.facade_runs_per_s` (0: no facade runs then);
- the spike shape (cbd7e68): `Step.phase`;
- Prometheus's figures (64dd871): `Step.prometheus`, `LoadSummary.prometheus`;
- what served the load and how it was made (6fc8601): `LoadSummary.backend` and `.load`,
  `AgentBlock.confirmations_per_run`, and per-scenario blocks where the first version wrote only
  each scenario's run count (read as a block with `runs` alone);
- the replicas (ba4fcf1): `Backend.replicas`, `.replica_names`, `.gpus_per_replica`;
- waiting for a person left out of run latency (issue 34): `RunsBlock.run_wall_ms`, wall time,
  written where a run waited; `run_ms` is the working time since (wall time before; the same
  where no run waited).

Numbers keep the type they were written with (an int stays an int), and `as_json` leaves out
what a file did not hold, so reading a summary and writing it again gives the same JSON.
Anything else — a missing field every version wrote, a wrong type, an unknown key — is one
line naming where (SummaryError).
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

# int | float, in that order: pydantic's smart union keeps an int an int and a float a float, so
# the JSON read back is the JSON written (a float field would turn 200 into 200.0).
Number = int | float


class SummaryError(ValueError):
    """A file that is not a summary.json the model can read; the message is one line."""


class _Block(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def as_json(self) -> dict[str, Any]:
        """As summary.json holds it: plain JSON types, only the fields that were set."""
        return self.model_dump(exclude_unset=True)


class Distribution(_Block):
    """Exact percentiles over every recorded value (None: no values)."""

    count: int
    mean: Number | None
    p50: Number | None
    p95: Number | None
    p99: Number | None


class ModelBlock(_Block):
    """The model users' streamed completions in one step."""

    requests: int
    errors: int
    requests_per_s: Number
    input_tokens: Number
    output_tokens: Number
    input_tokens_per_s: Number
    output_tokens_per_s: Number
    ttft_ms: Distribution
    itl_ms: Distribution
    tpot_ms: Distribution
    e2e_ms: Distribution
    goodput_per_s: Number
    slo_attainment: Number | None


class ScenarioBlock(_Block):
    """What one scenario's runs did in a step (facade runs carry tokens and latency only)."""

    runs: int
    # None: not recorded (the first summaries wrote each scenario's run count alone)
    errors: int | None = None
    turns_per_run: Number | None = None
    tool_calls_per_run: Number | None = None
    tool_errors_per_run: Number | None = None
    confirmations_per_run: Number | None = None
    tools: dict[str, int] = {}  # how often each tool was called, over the scenario's runs
    prompt_tokens_per_run: Number | None = None
    output_tokens_per_run: Number | None = None
    run_ms_p95: Number | None = None


class RunsBlock(_Block):
    """Whole runs in one step: the facade user's, and what the agent user's block shares."""

    runs: int
    errors: int
    runs_per_s: Number
    input_tokens: Number
    output_tokens: Number
    input_tokens_per_s: Number
    output_tokens_per_s: Number
    prompt_tokens_per_run: Number
    output_tokens_per_run: Number
    first_answer_ms: Distribution
    run_ms: Distribution  # working time: wall time less the client's wait over questions
    goodput_per_s: Number
    slo_attainment: Number | None
    scenarios: dict[str, ScenarioBlock]
    # wall time, the questions' waits in; written where runs waited (None: run_ms is wall time)
    run_wall_ms: Distribution | None = None

    @field_validator("scenarios", mode="before")
    @classmethod
    def _run_counts(cls, value: Any) -> Any:
        """Before 6fc8601 a scenario was its run count: read as a block of runs alone."""
        if isinstance(value, dict):
            return {
                name: {"runs": block} if isinstance(block, int) else block
                for name, block in value.items()
            }
        return value


class PromptPrefix(_Block):
    """The step's model calls as prompt records: how much of each call's prompt repeats a
    prefix sent before (a prefix cache, vLLM's or an API's, can serve it). A call's repeated
    prefix is the previous call's whole prompt (a run resends its conversation); the first
    call's is its prompt less the text the load test sent (system prompt, tools, history)."""

    runs: int
    calls: int
    prompt_tokens: Number
    repeated_tokens: Number

    @property
    def repeated_share(self) -> float:
        return self.repeated_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


class AgentBlock(RunsBlock):
    """The agent users' runs through POST /v1/runs."""

    turns_per_run: Number
    tool_calls_per_run: Number
    confirmations_per_run: Number | None = None  # None: before 6fc8601
    prompt_prefix: PromptPrefix | None = None  # None: written before prompt records


class StepFigures(_Block):
    """A step's window as Prometheus saw it (loadtest.prometheus.FIGURES); None with a note."""

    gpu_util_percent_mean: Number | None
    gpu_busy_mean: Number | None
    vllm_ttft_p95_ms: Number | None
    kv_cache_usage_max: Number | None
    prefix_cache_hit_rate: Number | None = None  # None: not recorded before, or no lookups
    notes: list[str]


class Step(_Block):
    step: int
    phase: str | None = None  # the spike shape's baseline, spike and recovery
    users: int | None
    start: Number
    end: Number
    seconds: Number
    model: ModelBlock | None
    agent: AgentBlock | None
    facade: RunsBlock | None = None
    errors: int
    error_ratio: Number
    error_examples: list[str]
    slo_met: bool
    slo_broken: list[str]
    prometheus: StepFigures | None = None


class SloBlock(_Block):
    ttft_p99_ms: Number
    itl_p99_ms: Number
    run_p95_ms: Number
    facade_run_p95_ms: Number | None = None  # None: before the facade user (its runs' SLO)
    max_error_ratio: Number


class Capacity(_Block):
    """The highest step before the first that missed the SLO: what the cost calculator reads."""

    step: int
    users: int | None
    runs_per_s: Number
    facade_runs_per_s: Number = 0.0  # absent before the facade user: none ran
    model_requests_per_s: Number
    output_tokens_per_s: Number
    input_tokens_per_s: Number
    prompt_tokens_per_run: Number | None
    output_tokens_per_run: Number | None


class Gpu(_Block):
    name: str
    count: int
    simulated: bool


class Backend(_Block):
    """What served the load, as its endpoints said it (loadtest.backend)."""

    kind: Literal["vllm", "simulator", "unknown"]
    simulated: bool | None = None  # None: nothing said
    name: str | None = None
    version: str | None = None
    models: list[str] = []
    max_model_len: int | None = None
    gpu: Gpu | None = None
    endpoint: str | None = None
    sources: list[str] = []
    notes: list[str] = []
    profile: str | None = None  # the simulator's latency profile
    gpus: list[Gpu] = []
    replicas: int | None = None
    replica_names: list[str] = []
    gpus_per_replica: int | None = None


class ScheduleStep(_Block):
    offset: Number  # seconds from the start of the test
    users: int
    phase: str | None


class LoadInfo(_Block):
    """How the load was made: the users, shape, schedule and think times."""

    user_classes: str
    shape: str
    think_seconds: Number
    model_think_seconds: Number
    max_tokens: int
    schedule: list[ScheduleStep]
    seconds: Number


class PrometheusSource(_Block):
    """Which Prometheus the step figures came from (None: none) and with which expressions."""

    url: str | None
    queries: dict[str, str]
    recording_rules: dict[str, str | None]
    note: str | None = None  # why figures may be missing or short


class CapacityReading(StrEnum):
    """What the steps past the capacity step say of it."""

    SLO_MISSED = "slo_missed"  # the next step served as much or more, but missed the SLO
    SATURATED = "saturated"  # a later step served less: the replica had no more to give
    LOWER_BOUND = "lower_bound"  # no step past it: the limit was not reached


def served_per_s(step: Step) -> float:
    """A step's throughput: its runs/s (agent and facade users) where runs were made, else its
    model requests/s."""
    runs = sum((b.runs_per_s for b in (step.agent, step.facade) if b is not None), 0.0)
    if step.agent is not None or step.facade is not None:
        return runs
    return step.model.requests_per_s if step.model is not None else 0.0


def by_users(steps: list[Step]) -> list[Step]:
    """The steps from the fewest users to the most (a spike's phases in their order)."""
    return sorted(steps, key=lambda s: (s.users or 0, s.step))


def knee(steps: list[Step]) -> Step | None:
    """The capacity at the SLO: of the steps before the first that missed it (by users), the
    one that served the most (the fewest users on a tie). A step past the first miss that met
    the SLO again is the noise around the knee, not capacity to count on; a step with more
    users that served less is a saturated replica, not more capacity."""
    ordered = by_users(steps)
    first_miss = next((i for i, s in enumerate(ordered) if not s.slo_met), len(ordered))
    within = ordered[:first_miss]
    return max(within, key=served_per_s) if within else None


class LoadSummary(_Block):
    slo: SloBlock
    percentile_method: str
    steps: list[Step]
    capacity_at_slo: Capacity | None
    backend: Backend | None = None
    load: LoadInfo | None = None
    prometheus: PrometheusSource | None = None

    def step_of(self, number: int) -> Step | None:
        return next((step for step in self.steps if step.step == number), None)

    def simulated_mark(self) -> str:
        """What a server figure's label adds when the simulator served the load: its GPU
        utilisation and its TTFT are the simulator's, not a GPU's."""
        return " (simulated)" if self.backend is not None and self.backend.simulated else ""

    def capacity_reading(self) -> tuple[CapacityReading, Step | None]:
        """How far the capacity step can be trusted, and the step that shows it (None for a
        lower bound). Past the capacity step by users: a step that still met the SLO served
        less (the knee chose the most), so the replica was saturated; else the next step missed
        the SLO; else nothing was tested past it."""
        capacity = self.capacity_at_slo
        chosen = None if capacity is None else self.step_of(capacity.step)
        if chosen is None:
            return CapacityReading.LOWER_BOUND, None
        ordered = by_users(self.steps)
        later = ordered[ordered.index(chosen) + 1 :]
        if later and later[0].slo_met:
            return CapacityReading.SATURATED, later[0]
        if later:
            return CapacityReading.SLO_MISSED, later[0]
        return CapacityReading.LOWER_BOUND, None

    def text(self) -> str:
        """The file's text, as `python -m loadtest` writes it."""
        return json.dumps(self.as_json(), indent=2, ensure_ascii=False) + "\n"

    def write(self, path: Path) -> None:
        path.write_text(self.text())

    @classmethod
    def parse(cls, data: Any, where: Path | str) -> LoadSummary:
        """The model of JSON already read from `where`; SummaryError naming the first problem."""
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            raise SummaryError(f"{where}: {problem(error)}") from None

    @classmethod
    def read(cls, path: Path) -> LoadSummary:
        return cls.parse(load_json(path), path)


def load_json(path: Path) -> Any:
    """The file's JSON; SummaryError when it cannot be read or is not JSON."""
    try:
        return json.loads(path.read_text())
    except OSError as error:
        raise SummaryError(f"cannot read {path}: {error.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SummaryError(f"{path} is not JSON: {error}") from None


def problem(error: ValidationError) -> str:
    """The first thing wrong, in one line, with how many more there are."""
    problems = error.errors()
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"]) or "the summary"
    said = f"{where}: {first['msg']}"
    if first["type"] != "missing":
        said += f" (got {_short(first['input'])})"
    more = f"; {len(problems) - 1} more problem(s)" if len(problems) > 1 else ""
    return f"not a summary.json of python -m loadtest: {said}{more}"


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
