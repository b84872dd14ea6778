"""Settings of the model simulator, read once from `SIM_*` environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from common.entrypoint import CommaList, LogLevel, OptionalHttpUrl

from .faults import FAULTS


class SimSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SIM_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    model: str = Field("leave-copilot", description="Served model name.")
    max_model_len: int = Field(4096, ge=16)
    profile: Literal["gpu", "instant"] = "gpu"
    # Overrides of the profile's numbers; unset keeps the profile's value.
    prefill_overhead_ms: float | None = Field(None, ge=0)
    prefill_per_token_ms: float | None = Field(None, ge=0)
    itl_ms: float | None = Field(None, ge=0)
    slowdown_per_running: float | None = Field(None, ge=0)
    max_num_seqs: int | None = Field(None, ge=1)
    kv_cache_tokens: int | None = Field(None, ge=1)
    block_size: int = Field(
        16,
        ge=1,
        description="Tokens per KV block: the prefix cache's unit (vLLM's --block-size; 16 is "
        "its default on a GPU, its CPU build uses 128).",
    )
    jitter: float = Field(0.0, ge=0, lt=1, description="± fraction applied to every delay.")
    seed: int | None = Field(None, description="Seed for the jitter; unset = unseeded.")
    validation: Literal["strict", "lenient"] = "strict"
    fault: str = Field("", description="Fault injected into every request (see docs/simulator.md).")
    fault_rate: float = Field(1.0, ge=0, le=1, description="Share of requests that get it.")
    stall_seconds: float = Field(30.0, ge=0)
    retry_after_seconds: int = Field(1, ge=0)
    timing_log: Path | None = Field(
        None,
        description="Append each streamed request's produced timing here, one JSON line: the "
        "truth a load tool's measurements are checked against.",
    )
    gpu_ids: CommaList = Field(
        default_factory=lambda: ["0"],
        description="GPU indices this replica stands for, in its simulated DCGM series.",
    )
    otlp_traces_endpoint: OptionalHttpUrl = Field(
        None,
        description="OTLP/HTTP traces URL (…/v1/traces): a span per request, as vLLM's "
        "--otlp-traces-endpoint gives; unset: none.",
    )
    log_level: LogLevel = "info"

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
