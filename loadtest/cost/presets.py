"""Dated price presets (GPUs, commercial APIs) and traffic profiles.

A preset only fills the settings the user left unset: any value from the settings file, a
COST_* variable or a flag wins. Every price names its source and date, because list prices move
every few months and a break-even is only as good as the price it was computed from.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuPreset:
    gpu_name: str
    gpu_hourly_usd: float  # one GPU, on-demand or spot as the source says
    source: str
    date: str

    def values(self) -> dict[str, object]:
        return {"gpu_name": self.gpu_name, "gpu_hourly_usd": self.gpu_hourly_usd}


@dataclass(frozen=True)
class ApiPreset:
    api_model: str
    api_input_usd_per_million: float
    api_output_usd_per_million: float
    source: str
    date: str
    # The price of input read from the provider's prompt cache (the repeated prefix of a call),
    # with its own source and date: a provider publishes it on its own line, or not at all.
    api_cached_input_usd_per_million: float
    cached_source: str
    cached_date: str

    def values(self) -> dict[str, object]:
        return {
            "api_model": self.api_model,
            "api_input_usd_per_million": self.api_input_usd_per_million,
            "api_output_usd_per_million": self.api_output_usd_per_million,
        }

    def cached_values(self) -> dict[str, object]:
        return {"api_cached_input_usd_per_million": self.api_cached_input_usd_per_million}


@dataclass(frozen=True)
class TrafficProfile:
    daily_profile: tuple[float, ...]  # % of the day's requests in each hour, 00:00 first
    peak_factor: float  # the busiest minutes ÷ the busiest hour's mean rate
    description: str

    def values(self) -> dict[str, object]:
        return {"daily_profile": list(self.daily_profile), "peak_factor": self.peak_factor}


# The defaults are the stack's own price defaults (common.cost.CostSettings), so the report and
# the Cost dashboard start from the same numbers; a test holds them equal. On-demand, not spot:
# the service runs around the clock, and spot capacity can be reclaimed at any moment.
DEFAULT_GPU_PRESET = "h200-runpod-on-demand"
DEFAULT_API_PRESET = "gpt-5-mini"
DEFAULT_TRAFFIC_PROFILE = "office_hours"

GPU_PRESETS: dict[str, GpuPreset] = {
    "h200-runpod-spot": GpuPreset("H200", 3.59, "RunPod list price, spot", "2026-03"),
    "h200-runpod-on-demand": GpuPreset("H200", 6.35, "RunPod list price, on-demand", "2026-03"),
    "h200-hyperscaler-low": GpuPreset(
        "H200", 4.50, "hyperscaler list prices, low end of the $4.50–7 range", "2026"
    ),
    "h100-gpu-cloud-low": GpuPreset(
        "H100", 1.49, "GPU-cloud list prices, low end of the $1.49–3.90 range", "2026"
    ),
    "h100-gpu-cloud-high": GpuPreset(
        "H100", 3.90, "GPU-cloud list prices, high end of the $1.49–3.90 range", "2026"
    ),
    "h100-hyperscaler-low": GpuPreset(
        "H100", 3.50, "hyperscaler list prices, low end of the $3.50–7 range", "2026"
    ),
}

# A provider without a published cached-input price bills cached input as input: such a preset's
# cached price is its input price, and its source says so (none is made up).
NO_CACHED_PRICE = "no cached-input price published: billed as input"

API_PRESETS: dict[str, ApiPreset] = {
    "gpt-5-mini": ApiPreset(
        "GPT-5 mini", 0.25, 2.00, "OpenAI list price", "2026",
        0.025, "OpenAI list price, cached input", "2026",
    ),
    "gpt-4.1-mini": ApiPreset(
        "GPT-4.1 mini", 0.40, 1.60, "OpenAI list price", "2026",
        0.10, "OpenAI list price, cached input", "2026",
    ),
    # Cache writes bill 1.25 × input (5-minute cache); a prefix every call repeats is written
    # once per 5 minutes, so the reads are what a busy service pays for it.
    "claude-haiku-4.5": ApiPreset(
        "Claude Haiku 4.5", 1.00, 5.00, "Anthropic list price", "2026",
        0.10, "Anthropic list price, cache read (writes 1.25 × input, 5-minute cache)", "2026",
    ),
    "gemini-3.5-flash": ApiPreset(
        "Gemini 3.5 Flash", 1.50, 9.00, "Google list price", "2026",
        1.50, NO_CACHED_PRICE, "2026",
    ),
    "llama-3.1-8b-hosted-low": ApiPreset(
        "Llama-3.1-8B (hosted)", 0.03, 0.05, "hosted open-model providers, cheapest", "2026",
        0.03, NO_CACHED_PRICE, "2026",
    ),
    "llama-3.1-8b-hosted-high": ApiPreset(
        "Llama-3.1-8B (hosted)", 0.30, 0.61, "hosted open-model providers, dearest", "2026",
        0.30, NO_CACHED_PRICE, "2026",
    ),
}  # fmt: skip

# What an engineer's hour costs the employer, for the ops labour: the mean wage of US software
# developers ($144,570 a year, BLS Occupational Employment and Wage Statistics, May 2024,
# SOC 15-1252) over 2,080 paid hours, × 44.40 / 31.25, private industry's total compensation
# per hour worked over its wages and salaries (BLS Employer Costs for Employee Compensation,
# September 2024): $98.75.
ENGINEER_USD_PER_HOUR = round(144_570 / 2080 * 44.40 / 31.25, 2)
ENGINEER_USD_PER_HOUR_SOURCE = (
    "BLS OEWS May 2024 mean wage of software developers, $144,570/year ÷ 2,080 h, × 1.42 "
    "benefits and employer costs (BLS ECEC, September 2024)"
)

# An internal leave assistant is used at work: 80 % of the day's requests in the 9 working
# hours 09:00–18:00, a dip at lunch, the busiest hour 10:00–11:00 with 11 % (2.64 × the day's
# mean rate), a trickle in the evening and at night. Illustrative: a site puts its own 24
# numbers from its traffic (the loop's leave_loop_runs_total by hour) in `daily_profile`.
OFFICE_DAY = (
    0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 2.0,  # 00–08
    4.0, 9.0, 11.0, 10.0, 5.0, 8.0, 10.0, 10.0,  # 08–16
    9.0, 8.0, 3.0, 2.5, 2.0, 1.5, 1.0, 0.5,  # 16–24
)  # fmt: skip

TRAFFIC_PROFILES: dict[str, TrafficProfile] = {
    "flat": TrafficProfile((100 / 24,) * 24, 1.0, "requests spread evenly over the whole day"),
    "office_hours": TrafficProfile(
        OFFICE_DAY,
        1.0,
        "80 % of the day's requests in 09:00–18:00, the busiest hour 10:00–11:00 with 11 %",
    ),
}
