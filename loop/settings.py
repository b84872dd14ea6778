"""Settings of the loop service, read once from `LOOP_*` environment variables."""

from __future__ import annotations

import socket

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from common.contract import SYSTEM_PROMPT
from common.entrypoint import CommaList, DatabaseUrl, HttpUrl, LogLevel, OptionalHttpUrl


class LoopSettings(BaseSettings):
    # compose passes a variable a site left unset as empty: empty means the default
    model_config = SettingsConfigDict(env_prefix="LOOP_", extra="ignore", env_ignore_empty=True)

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    model_base_url: HttpUrl = Field("http://127.0.0.1:8000/v1", description="OpenAI-compatible /v1")
    model_name: str = "leave-copilot"
    model_revision: str = Field("", max_length=200, description="Which weights serve it.")
    model_api_key: SecretStr = SecretStr("EMPTY")
    mcp_url: HttpUrl = "http://127.0.0.1:8090/mcp"
    max_turns: int = Field(8, ge=1, le=64)
    system_prompt: str = SYSTEM_PROMPT
    stop_tools: CommaList = Field(default_factory=list)
    temperature: float = Field(0.0, ge=0, le=2)
    max_tokens: int | None = Field(None, ge=1)
    model_context_tokens: int | None = Field(
        None, ge=256, description="The model's context length; unset: as /v1/models lists it."
    )
    tool_result_max_tokens: int = Field(1024, ge=64, description="Longer tool results are cut.")
    model_timeout_seconds: float = Field(60.0, gt=0)
    model_max_retries: int = Field(3, ge=0, le=10)
    model_retry_backoff_seconds: float = Field(0.5, ge=0)
    tool_timeout_seconds: float = Field(30.0, gt=0)
    mcp_connect_timeout_seconds: float = Field(10.0, gt=0)
    confirmation_timeout_seconds: float = Field(120.0, gt=0)
    tool_concurrency: int = Field(4, ge=1, le=64)
    max_concurrent_runs: int = Field(64, ge=1)
    session_max_messages: int = Field(40, ge=2, description="History kept per session.")
    store_url: DatabaseUrl = "sqlite:///var/loop.db"
    agent_model_name: str = Field("leave-copilot-agent", description="Model name of the facade.")
    otlp_traces_endpoint: OptionalHttpUrl = Field(
        None, description="OTLP/HTTP traces URL (…/v1/traces); unset: no traces exported."
    )
    trace_log: bool = Field(False, description="Also log each span as a JSON line (loop.trace).")
    max_header_bytes: int = Field(16384, ge=1024, description="Larger request headers → 431.")
    max_body_bytes: int = Field(1_048_576, ge=1024, description="Larger request bodies → 413.")
    rejected_token_cache_seconds: float = Field(
        30.0, ge=0, description="How long a token the MCP server refused is refused unasked."
    )
    auth_failure_limit: int = Field(
        20, ge=1, description="Failed authentications per client address per window."
    )
    auth_failure_window_seconds: float = Field(60.0, gt=0)
    instance_id: str | None = Field(
        None,
        max_length=128,
        description="This loop's name on a store other loops share; unset: host name:port "
        "(a container's host name is its own).",
    )
    lease_seconds: float = Field(
        30.0, ge=1, description="A loop that stops renewing for this long loses its runs."
    )
    log_level: LogLevel = "info"

    @property
    def identity(self) -> str:
        """Stable across restarts of the same loop (so it recognises its own runs), distinct
        for two loops on one host (they listen on different ports)."""
        return self.instance_id or f"{socket.gethostname()}:{self.port}"
