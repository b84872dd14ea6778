"""Settings of the model simulator, read once from `SIM_*` environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from common.entrypoint import CommaList, LogLevel, OptionalHttpUrl
from common.settings_meta import deployed

from .faults import FAULTS

# The docs' default of a setting whose default is a profile's or a preset's number.
PROFILE = "the profile's"


class SimSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SIM_", extra="ignore")

    host: str = Field("127.0.0.1", description="Interface to bind.")
    port: int = Field(8000, ge=1, le=65535, description="Port.")
    model: str = Field("leave-copilot", description="Served model name.")
    # Two simulators with different roots stand for two fine-tunes served under one name (the
    # promote and rollback tests): vLLM's /v1/models says which weights it loaded the same way.
    model_root: str = Field(
        "",
        max_length=200,
        description="What `/v1/models` reports as the model's `root` (vLLM: the path of the "
        "weights it loaded); empty: the served name.",
    )
    max_model_len: int = Field(
        4096, ge=16, description="Context length (prompt + `max_tokens` above it → 400)."
    )
    profile: Literal["gpu", "instant"] = Field(
        "gpu",
        description="Latency profile: `gpu` (a modelled H200 serving an 8B model) or `instant`.",
        json_schema_extra=deployed(env=True),
    )
    # Overrides of the profile's numbers; unset keeps the profile's value.
    prefill_overhead_ms: float | None = Field(
        None,
        ge=0,
        description="Overrides the profile's fixed cost of each request's prefill.",
        json_schema_extra=deployed(shown_default=PROFILE),
    )
    prefill_per_token_ms: float | None = Field(
        None,
        ge=0,
        description=(
            "Overrides the profile's prefill cost per prompt token not in the prefix cache."
        ),
        json_schema_extra=deployed(shown_default=PROFILE),
    )
    itl_ms: float | None = Field(
        None,
        ge=0,
        description="Overrides the profile's gap between two output tokens of one request.",
        json_schema_extra=deployed(shown_default=PROFILE),
    )
    slowdown_per_running: float | None = Field(
        None,
        ge=0,
        description="Overrides the profile's slowdown of every delay per other request running.",
        json_schema_extra=deployed(shown_default=PROFILE),
    )
    max_num_seqs: int | None = Field(
        None,
        ge=1,
        description=(
            "Overrides the profile's requests running at once (the rest wait in arrival order)."
        ),
        json_schema_extra=deployed(shown_default=PROFILE),
    )
    kv_cache_tokens: int | None = Field(
        None,
        ge=1,
        description="Overrides the profile's KV cache size in tokens.",
        json_schema_extra=deployed(shown_default=PROFILE),
    )
    block_size: int = Field(
        16,
        ge=1,
        description=(
            "Tokens per KV block, the prefix cache's unit (vLLM's `--block-size`: 16 "
            "is its GPU default, 128 its CPU build's); the cache holds "
            "`KV_CACHE_TOKENS / BLOCK_SIZE` blocks "
            "([Simulator](simulator.md#prefix-cache))."
        ),
    )
    jitter: float = Field(0.0, ge=0, lt=1, description="± fraction applied to every delay.")
    seed: int | None = Field(
        None, description="Seed of the jitter and of `SIM_FAULT_RATE`; unset: unseeded."
    )
    validation: Literal["strict", "lenient"] = Field(
        "strict", description="`strict` (OpenAI's transcript checks) or `lenient` (as vLLM)."
    )
    fault: str = Field(
        "",
        description=(
            "Fault(s) injected into every request, comma-separated ([Simulator](simulator.md))."
        ),
    )
    fault_rate: float = Field(
        1.0, ge=0, le=1, description="Share of requests that get `SIM_FAULT`."
    )
    stall_seconds: float = Field(
        30.0, ge=0, description="How long the `stall` fault holds a request."
    )
    retry_after_seconds: int = Field(1, ge=0, description="`Retry-After` of the `http_429` fault.")
    timing_log: Path | None = Field(
        None,
        description=(
            "Append each streamed request's produced TTFT and token gaps here, one "
            "JSON line: the truth a load tool's measurements are checked against "
            "([Simulator](simulator.md#timing-log))."
        ),
    )
    gpu_ids: CommaList = Field(
        default_factory=lambda: ["0"],
        description=(
            "The GPU indices this replica stands for: one simulated DCGM series each "
            "(the layout sets it per replica)."
        ),
    )
    otlp_traces_endpoint: OptionalHttpUrl = Field(
        None,
        description=(
            "OTLP/HTTP traces URL: an `llm_request` span per request, a child of its "
            "`traceparent`, as vLLM's `--otlp-traces-endpoint` gives; unset: none "
            "(compose: `OTLP_TRACES_ENDPOINT`)."
        ),
    )
    log_level: LogLevel = Field("info", description="uvicorn's log level.")

    @field_validator("gpu_ids")
    @classmethod
    def _gpu_indices(cls, value: list[str]) -> list[str]:
        if not value or not all(gpu.isdigit() for gpu in value):
            raise ValueError(f"expected comma-separated GPU indices (e.g. 0,1), got {value!r}")
        return value

    @field_validator("block_size")
    @classmethod
    def _block_fits(cls, value: int, info: ValidationInfo) -> int:
        from .latency import PROFILES  # the profiles need these settings; read them late

        profile = info.data.get("profile")
        capacity = info.data.get("kv_cache_tokens") or (
            PROFILES[profile].kv_cache_tokens if profile in PROFILES else None
        )
        if capacity is not None and value > capacity:
            raise ValueError(
                f"a block of {value} tokens is larger than the whole KV cache ({capacity} tokens)"
            )
        return value

    @field_validator("fault")
    @classmethod
    def _known_faults(cls, value: str) -> str:
        unknown = {f.strip() for f in value.split(",") if f.strip()} - FAULTS
        if unknown:
            raise ValueError(f"unknown fault(s) {sorted(unknown)}; known: {sorted(FAULTS)}")
        return value
