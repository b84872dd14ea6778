"""The calculator's settings: defaults < preset < settings file < COST_* variables < flags.

Each value keeps where it came from, so the report can print every assumption with its source
and an error can name the very setting that is wrong (a file key, a variable or a flag).
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from common.cost import MAX_API_USD_PER_MILLION, CostSettings
from common.entrypoint import StartupError
from common.settings_meta import deployed

from .presets import (
    API_PRESETS,
    DEFAULT_API_PRESET,
    DEFAULT_GPU_PRESET,
    DEFAULT_TRAFFIC_PROFILE,
    ENGINEER_USD_PER_HOUR,
    ENGINEER_USD_PER_HOUR_SOURCE,
    GPU_PRESETS,
    TRAFFIC_PROFILES,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_API_PROMPT = "loadtest/prompts/api_system_prompt.txt"
ENV_PREFIX = "COST_"

# The docs' default of a setting whose default is a profile's or a preset's number.
PROFILE = "the profile's"


class SettingError(StartupError):
    """A setting, the summary or a prompt file cannot be used; the message names which."""


# The sane range of each setting: what no real deployment is outside of. A value past it is a
# typo (1e300, a stray exponent) and is refused with one line, so that every accepted input
# gives a report in about a second.
MAX_REQUESTS_PER_DAY = 1e12  # a trillion agent runs a day: far past any one company
MAX_CAPACITY_PER_S = 1e6
MIN_CAPACITY_PER_S = 1e-3  # one request in 17 minutes
MAX_TOKENS_PER_REQUEST = 1e8
MAX_USD = 1e9  # a month's ops, one retraining, a month's storage
MAX_GPUS_PER_REPLICA = 1024
HOURS_PER_DAY = 24
MAX_OPS_HOURS_PER_MONTH = 744  # every hour of a 31-day month
# Percentages typed with one decimal may miss 100 by a rounding; more is a profile that
# does not add up.
PROFILE_SLACK_PERCENT = 0.05
CAPACITY_BASES = ("auto", "runs", "tokens", "output_tokens")


class CalculatorSettings(CostSettings):
    """COST_* settings. The three inherited ones (GPU $/h, API input and output $/1M) are the
    stack's own price settings, which the loop exports to Prometheus; the rest only the
    calculator reads. Every number must be finite and inside its sane range."""

    model_config = SettingsConfigDict(env_prefix="COST_", extra="ignore", allow_inf_nan=False)

    gpu_preset: str = Field(
        DEFAULT_GPU_PRESET,
        description=(
            "Fills `gpu_name` and `gpu_hourly_usd`: `h200-runpod-on-demand` ($6.35), "
            "`h200-runpod-spot` ($3.59), `h200-hyperscaler-low` ($4.50), "
            "`h100-gpu-cloud-low` ($1.49), `h100-gpu-cloud-high` ($3.90), "
            "`h100-hyperscaler-low` ($3.50); source and date of each in the report."
        ),
    )
    gpu_name: str = Field(
        GPU_PRESETS[DEFAULT_GPU_PRESET].gpu_name,
        description="GPU model, for the report.",
        json_schema_extra=deployed(shown_default="the preset's"),
    )
    gpu_count: int = Field(
        1,
        ge=1,
        le=MAX_GPUS_PER_REPLICA,
        description=(
            "GPUs behind the capacity the load test measured (one replica: tensor × "
            "data parallel); the staircase adds whole replicas."
        ),
    )
    min_replicas: int = Field(
        2,
        ge=1,
        le=64,
        description=(
            "Replicas kept running at any volume: 2 (N+1) so that one can fail or be upgraded "
            "while the other serves; 1 accepts a single point of failure, and the report says so."
        ),
    )
    scaling: Literal["always_on", "scale_down"] = Field(
        "always_on",
        description=(
            "`always_on`: every hour runs the replicas the peak hour needs; `scale_down`: "
            "each hour runs what its own peak needs (KEDA), never fewer than `min_replicas` "
            "in the working hours (at or above the day's mean rate) nor than "
            "`off_hours_min_replicas` in the others."
        ),
    )
    off_hours_min_replicas: int = Field(
        1,
        ge=0,
        le=64,
        description=(
            "With `scale_down`: replicas kept outside the working hours (KEDA's "
            "minReplicaCount there; 0 scales to zero and pays a cold start on the first request)."
        ),
    )
    traffic_profile: str = Field(
        DEFAULT_TRAFFIC_PROFILE,
        description=(
            "Fills `daily_profile` and `peak_factor`: `office_hours` (80 % of the day's "
            "requests in 09:00–18:00, peak hour 10:00 with 11 %) or `flat`."
        ),
    )
    # NoDecode: a variable gives "0.5, 0.5, …", split by the validator below, not JSON
    daily_profile: Annotated[list[float], NoDecode] = Field(
        list(TRAFFIC_PROFILES[DEFAULT_TRAFFIC_PROFILE].daily_profile),
        description=(
            "% of the day's requests in each hour, 24 numbers from 00:00 adding up to 100 "
            "(comma-separated in a variable or flag); GPUs are sized for the busiest."
        ),
        json_schema_extra=deployed(shown_default=PROFILE),
    )
    peak_factor: float = Field(
        TRAFFIC_PROFILES[DEFAULT_TRAFFIC_PROFILE].peak_factor,
        ge=1,
        le=100,
        description="The busiest minutes ÷ the busiest hour's mean rate.",
        json_schema_extra=deployed(shown_default=PROFILE),
    )
    requests_per_day: float | None = Field(
        None,
        gt=0,
        le=MAX_REQUESTS_PER_DAY,
        description=(
            "Expected volume: the verdict, per-request figures and a staircase row "
            "there (unset: one replica's daily capacity)."
        ),
    )
    capacity_basis: Literal["auto", "runs", "tokens", "output_tokens"] = Field(
        "auto",
        description=(
            "How the capacity step becomes requests/s per replica; `auto` is `runs` "
            "when the step ran agent users only and `tokens` when model or facade "
            "users shared it; `runs` on such a step is refused, saying why ([What a "
            "request is](loadtest.md#what-a-request-is))."
        ),
    )
    capacity_requests_per_s: float | None = Field(
        None,
        ge=MIN_CAPACITY_PER_S,
        le=MAX_CAPACITY_PER_S,
        description="Requests/s one replica serves at the SLO.",
        json_schema_extra=deployed(shown_default="from the summary"),
    )
    input_tokens_per_request: float | None = Field(
        None,
        ge=0,
        le=MAX_TOKENS_PER_REQUEST,
        description="The fine-tune's input tokens per request.",
        json_schema_extra=deployed(shown_default="from the summary"),
    )
    output_tokens_per_request: float | None = Field(
        None,
        ge=0,
        le=MAX_TOKENS_PER_REQUEST,
        description="The fine-tune's output tokens per request.",
        json_schema_extra=deployed(shown_default="from the summary"),
    )
    model_calls_per_request: float | None = Field(
        None,
        ge=1,
        le=1000,
        description="Model calls per request, each resending the system prompt.",
        json_schema_extra=deployed(shown_default="from the summary (turns per run), else 1"),
    )
    ops_usd_per_month: float = Field(
        0.0,
        ge=0,
        le=MAX_USD,
        description="Ops labour for the self-hosted stack (or set the two below).",
        json_schema_extra=deployed(shown_default="0, or hours × rate"),
    )
    ops_hours_per_month: float = Field(
        0.0,
        ge=0,
        le=MAX_OPS_HOURS_PER_MONTH,
        description=(
            "Engineer hours a month the self-hosted stack takes (upgrades, the release gate, "
            "restore drills, on-call); × `ops_usd_per_hour` gives the ops labour."
        ),
    )
    ops_usd_per_hour: float = Field(
        ENGINEER_USD_PER_HOUR,
        gt=0,
        le=10_000,
        description=(
            f"An engineer's hour as it costs the employer: ${ENGINEER_USD_PER_HOUR:.2f} "
            f"({ENGINEER_USD_PER_HOUR_SOURCE})."
        ),
    )
    retraining_usd: float = Field(
        0.0, ge=0, le=MAX_USD, description="What one retraining of the model costs."
    )
    retraining_every_days: float = Field(
        90.0, ge=1, le=3650, description="Days between two retrainings."
    )
    storage_egress_usd_per_month: float = Field(
        0.0, ge=0, le=MAX_USD, description="Storage, egress and other overhead of self-hosting."
    )
    api_preset: str = Field(
        DEFAULT_API_PRESET,
        description=(
            "Fills `api_model` and the API prices: `gpt-5-mini` ($0.25 / $2.00), "
            "`gpt-4.1-mini` ($0.40 / $1.60), `claude-haiku-4.5` ($1 / $5), "
            "`gemini-3.5-flash` ($1.50 / $9), `llama-3.1-8b-hosted-low` ($0.03 / "
            "$0.05), `llama-3.1-8b-hosted-high` ($0.30 / $0.61) per 1M input / output"
            " tokens, 2026; cached input $0.025, $0.10, $0.10 (cache read) for the first "
            "three, the input price for the others (none published)."
        ),
    )
    api_model: str = Field(
        API_PRESETS[DEFAULT_API_PRESET].api_model,
        description="API model, for the report.",
        json_schema_extra=deployed(shown_default="the preset's"),
    )
    api_blended_usd_per_million: float | None = Field(
        None,
        ge=0,
        le=MAX_API_USD_PER_MILLION,
        description="One price for every token instead of input and output prices.",
    )
    api_cached_input_usd_per_million: float = Field(
        API_PRESETS[DEFAULT_API_PRESET].api_cached_input_usd_per_million,
        ge=0,
        le=MAX_API_USD_PER_MILLION,
        description=(
            "API price per 1M input tokens read from its prompt cache (the repeated prefix); "
            "at most the input price. Unset with an input price of your own: the input price."
        ),
        json_schema_extra=deployed(shown_default="the preset's"),
    )
    api_cached_share: float | None = Field(
        None,
        ge=0,
        le=1,
        description=(
            "Share of the API's input tokens billed at the cached price (0–1), instead of the "
            "one derived from the prompts and the summary's tokens and turns per run."
        ),
        json_schema_extra=deployed(shown_default="derived"),
    )
    api_system_prompt_file: str = Field(
        DEFAULT_API_PROMPT,
        description=(
            "The system prompt the API model needs (full rules, examples; in the "
            "settings file: relative to the file); empty: the fine-tune's own."
        ),
    )
    sensitivity_step: float = Field(
        0.25,
        gt=0,
        lt=1,
        description="How far each input moves in the sensitivity table (± this share).",
    )

    @field_validator("daily_profile", mode="before")
    @classmethod
    def _numbers_from_text(cls, value: object) -> object:
        # a variable or a flag gives text: "0.5, 0.5, …" (or a JSON list)
        if isinstance(value, str):
            return [part for part in value.replace("[", " ").replace("]", " ")
                    .replace(",", " ").split()]  # fmt: skip
        return value


FIELDS = tuple(CalculatorSettings.model_fields)
# Settings an earlier version had, and what took their place.
RETIRED = {
    "billing_hours_per_day": "scaling (always_on or scale_down)",
    "busy_hours_per_day": "daily_profile (24 hourly percentages)",
    "busy_share": "daily_profile (24 hourly percentages)",
}


@dataclass(frozen=True)
class Source:
    """Where a value came from: how to name it in an error, and how to print it."""

    kind: Literal["default", "preset", "file", "env", "flag", "summary"]
    setting: str  # e.g. "COST_GPU_HOURLY_USD", "--gpu-hourly-usd", "cost.toml: gpu_hourly_usd"
    origin: str  # e.g. "default", "settings file cost.toml", "preset h200-runpod-spot (…)"


@dataclass(frozen=True)
class Loaded:
    settings: CalculatorSettings
    sources: dict[str, Source]
    api_prompt_path: Path | None  # None: the API model gets the fine-tune's own prompt


def env_name(field: str) -> str:
    return f"{ENV_PREFIX}{field.upper()}"


def flag_name(field: str) -> str:
    return f"--{field.replace('_', '-')}"


def read_file(path: Path) -> dict[str, object]:
    try:
        values = tomllib.loads(path.read_text())
    except OSError as error:
        raise SettingError(f"--settings: cannot read {path}: {error.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise SettingError(f"{path}: not a TOML file: {error}") from None
    for key in values:
        if key in RETIRED:
            raise SettingError(f"{path}: {key}: no longer a setting: use {RETIRED[key]}")
        if key not in FIELDS:
            close = difflib.get_close_matches(key, FIELDS, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise SettingError(f"{path}: {key}: unknown setting{hint}")
    return values


def load(
    settings_file: Path | None, environ: Mapping[str, str], flags: Mapping[str, str]
) -> Loaded:
    """The settings from the layers, lowest first; presets and the profile fill what is unset."""
    values: dict[str, object] = {}
    sources: dict[str, Source] = {}
    if settings_file is not None:
        for key, value in read_file(settings_file).items():
            values[key] = value
            sources[key] = Source(
                "file", f"{settings_file}: {key}", f"settings file {settings_file}"
            )
    for old, new in RETIRED.items():
        if env_name(old) in environ:
            raise SettingError(f"{env_name(old)}: no longer a setting: use {new}")
    for field in FIELDS:
        if env_name(field) in environ:
            values[field] = environ[env_name(field)]
            sources[field] = Source("env", env_name(field), env_name(field))
    for field, value in flags.items():
        values[field] = value
        sources[field] = Source("flag", flag_name(field), flag_name(field))

    def fill(kind: str, field: str, known: Mapping[str, object]) -> str:
        name = values.get(field, CalculatorSettings.model_fields[field].default)
        if not isinstance(name, str) or name not in known:
            setting = sources[field].setting if field in sources else env_name(field)
            raise SettingError(
                f"{setting}: unknown {kind} {name!r} (known: {', '.join(sorted(known))})"
            )
        return name

    gpu = fill("GPU preset", "gpu_preset", GPU_PRESETS)
    api = fill("API preset", "api_preset", API_PRESETS)
    profile = fill("traffic profile", "traffic_profile", TRAFFIC_PROFILES)
    g, a, p = GPU_PRESETS[gpu], API_PRESETS[api], TRAFFIC_PROFILES[profile]
    cached = "api_cached_input_usd_per_million"
    if cached not in values and "api_input_usd_per_million" in values:
        # an input price of one's own: the preset's cached price was not read with it
        values[cached] = values["api_input_usd_per_million"]
        sources[cached] = Source(
            "preset", env_name(cached), "the input price (no cached-input price set with it)"
        )
    if "ops_hours_per_month" in values:
        if "ops_usd_per_month" in values:
            raise SettingError(
                f"{sources['ops_usd_per_month'].setting} and "
                f"{sources['ops_hours_per_month'].setting}: set the ops labour one way, as "
                "dollars a month or as hours a month (× ops_usd_per_hour)"
            )
        values["ops_usd_per_month"] = _ops_from_hours(values)
        rate = "ops_usd_per_hour"
        rate_origin = sources[rate].origin if rate in sources else ENGINEER_USD_PER_HOUR_SOURCE
        sources["ops_usd_per_month"] = Source(
            "preset",
            sources["ops_hours_per_month"].setting,
            f"ops_hours_per_month × ops_usd_per_hour ({rate_origin})",
        )
    for preset_values, origin in (
        (a.cached_values(), f"preset {api} ({a.cached_source}, {a.cached_date})"),
        (g.values(), f"preset {gpu} ({g.source}, {g.date})"),
        (a.values(), f"preset {api} ({a.source}, {a.date})"),
        (p.values(), f"traffic profile {profile}"),
    ):
        for field, value in preset_values.items():
            if field not in values:
                values[field] = value
                sources[field] = Source("preset", env_name(field), origin)
    for field in FIELDS:
        sources.setdefault(field, Source("default", env_name(field), "default"))

    try:
        # model_validate, not the constructor: the layers above already read the environment
        settings = CalculatorSettings.model_validate(values)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else ""
        setting = sources[field].setting if field in sources else "settings"
        raise SettingError(f"{setting}: {error['msg']} (got {error['input']!r})") from None
    check(settings, sources)
    return Loaded(settings, sources, _prompt_path(settings, sources, settings_file))


def check(settings: CalculatorSettings, sources: Mapping[str, Source]) -> None:
    """What one field's bounds cannot say: the traffic must fit the hours it is given."""
    s = settings

    def blame(*fields: str) -> str:
        # the one the user set, rather than one a preset or profile filled in
        given = [f for f in fields if sources[f].kind in ("file", "env", "flag")]
        return sources[(given or list(fields))[0]].setting

    if (
        s.api_blended_usd_per_million is None
        and s.api_cached_input_usd_per_million > s.api_input_usd_per_million
    ):
        raise SettingError(
            f"{blame('api_cached_input_usd_per_million', 'api_input_usd_per_million')}: a "
            "cached-input price above the input price: no API bills a cache hit dearer than "
            f"a miss (got cached ${s.api_cached_input_usd_per_million:g} > input "
            f"${s.api_input_usd_per_million:g} per 1M tokens)"
        )
    profile = s.daily_profile
    setting = sources["daily_profile"].setting
    if len(profile) != HOURS_PER_DAY:
        raise SettingError(
            f"{setting}: {len(profile)} numbers, need 24: the % of the day's requests in each "
            "hour from 00:00"
        )
    negative = [hour for hour, value in enumerate(profile) if value < 0]
    if negative:
        hour = negative[0]
        raise SettingError(f"{setting}: hour {hour:02d}:00 has {profile[hour]:g} %, below 0")
    total = sum(profile)
    if abs(total - 100) > PROFILE_SLACK_PERCENT:
        raise SettingError(
            f"{setting}: the 24 hours add up to {total:g} %, not 100 %: every request of the "
            "day falls in one of them"
        )


def _ops_from_hours(values: Mapping[str, object]) -> float:
    """Hours × rate, each as given (text from a variable or flag) or the rate's default; what
    is not a number is left to the model's validation, which names its setting."""
    try:
        hours = float(str(values["ops_hours_per_month"]))
        rate = float(str(values.get("ops_usd_per_hour", ENGINEER_USD_PER_HOUR)))
    except ValueError:
        return 0.0
    if not 0 <= hours <= MAX_OPS_HOURS_PER_MONTH:
        return 0.0  # the hours' own bounds are the error to show
    return hours * rate


def _prompt_path(
    settings: CalculatorSettings, sources: Mapping[str, Source], settings_file: Path | None
) -> Path | None:
    given = settings.api_system_prompt_file
    if not given:
        return None
    path = Path(given)
    kind = sources["api_system_prompt_file"].kind
    if not path.is_absolute():
        # the default ships with the package; a path in the settings file is read from its folder
        if kind == "default":
            path = REPO_ROOT / path
        elif kind == "file" and settings_file is not None:
            path = settings_file.parent / path
    if not path.is_file():
        raise SettingError(
            f"{sources['api_system_prompt_file'].setting}: no such file: {given} "
            "(empty: the API model gets the fine-tune's own prompt)"
        )
    return path
