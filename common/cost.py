"""Cost inputs and formulas: self-hosted GPU time vs a commercial API, per token and per run.

The price inputs are settings (`COST_*` variables). The loop exports them as gauges so that
Prometheus's cost rules (monitoring/prometheus/rules/cost.yml) use the very figures the
stack was configured with; those rules are the formulas below written in PromQL, and a test
holds the two to the same numbers.

Defaults are dated public list prices (users override them all): an H200 at a GPU cloud,
$6.35/h on demand (March 2026; an always-on service cannot live on spot capacity, which can be
taken back at any time); a small commercial model, $0.25 input / $2.00 output per 1M tokens
(GPT-5 mini, 2026), $0.025 for input read from its prompt cache. The bounds refuse what no
price list has ($inf, nan, a 300-digit price).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from common.settings_meta import deployed

SECONDS_PER_HOUR = 3600
PER_MILLION = 1_000_000
# Beyond any list price of 2026 by two orders of magnitude: a value past these is a typo.
MAX_GPU_HOURLY_USD = 1000.0
MAX_API_USD_PER_MILLION = 1000.0


class CostSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="COST_", extra="ignore")

    gpu_hourly_usd: float = Field(
        6.35,
        ge=0,
        le=MAX_GPU_HOURLY_USD,
        allow_inf_nan=False,
        description="What the GPU host costs per hour (on-demand).",
        json_schema_extra=deployed(env=True, configmap=True),
    )
    api_input_usd_per_million: float = Field(
        0.25,
        ge=0,
        le=MAX_API_USD_PER_MILLION,
        allow_inf_nan=False,
        description=(
            "Commercial API input price per 1M tokens, to compare with (default: a "
            "small model, 2026)."
        ),
        json_schema_extra=deployed(env=True, configmap=True),
    )
    api_cached_input_usd_per_million: float = Field(
        0.025,
        ge=0,
        le=MAX_API_USD_PER_MILLION,
        allow_inf_nan=False,
        description=(
            "Commercial API price per 1M input tokens read from its prompt cache (the prefix a "
            "call repeats; GPT-5 mini, 2026)."
        ),
        json_schema_extra=deployed(env=True, configmap=True),
    )
    api_output_usd_per_million: float = Field(
        2.00,
        ge=0,
        le=MAX_API_USD_PER_MILLION,
        allow_inf_nan=False,
        description="Commercial API output price per 1M tokens.",
        json_schema_extra=deployed(env=True, configmap=True),
    )


def self_hosted_usd_per_million_tokens(gpu_hourly_usd: float, tokens_per_second: float) -> float:
    """GPU time paid for each million tokens at the measured rate (idle time included)."""
    if tokens_per_second <= 0:
        return float("inf")
    return gpu_hourly_usd / SECONDS_PER_HOUR / tokens_per_second * PER_MILLION


def self_hosted_usd_per_run(gpu_hourly_usd: float, runs_per_second: float) -> float:
    if runs_per_second <= 0:
        return float("inf")
    return gpu_hourly_usd / SECONDS_PER_HOUR / runs_per_second


def api_usd_per_run(
    prompt_tokens_per_run: float,
    completion_tokens_per_run: float,
    settings: CostSettings,
    cached_prompt_tokens_per_run: float = 0.0,
) -> float:
    """What the same run's tokens would cost at the API's list prices: the prompt tokens that
    repeat a prefix (a share of the prompt tokens) at the cached-input price, the rest at the
    input price."""
    fresh = prompt_tokens_per_run - cached_prompt_tokens_per_run
    return (
        fresh * settings.api_input_usd_per_million
        + cached_prompt_tokens_per_run * settings.api_cached_input_usd_per_million
        + completion_tokens_per_run * settings.api_output_usd_per_million
    ) / PER_MILLION


class CostSettingsCollector(Collector):
    """The price inputs as gauges, for the cost recording rules and dashboards."""

    def __init__(self, settings: CostSettings) -> None:
        self.settings = settings

    def collect(self) -> Iterator[GaugeMetricFamily]:
        s = self.settings
        for name, documentation, value in (
            ("leave_cost_gpu_hourly_usd", "GPU host price per hour (setting).", s.gpu_hourly_usd),
            (
                "leave_cost_api_input_usd_per_million_tokens",
                "Commercial API price per 1M input tokens (setting).",
                s.api_input_usd_per_million,
            ),
            (
                "leave_cost_api_cached_input_usd_per_million_tokens",
                "Commercial API price per 1M input tokens read from its prompt cache (setting).",
                s.api_cached_input_usd_per_million,
            ),
            (
                "leave_cost_api_output_usd_per_million_tokens",
                "Commercial API price per 1M output tokens (setting).",
                s.api_output_usd_per_million,
            ),
        ):
            yield GaugeMetricFamily(name, documentation, value=value)
