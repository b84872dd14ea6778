"""Settings of the loop service, read once from `LOOP_*` environment variables."""

from __future__ import annotations

import ipaddress
import socket

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from common.contract import SYSTEM_PROMPT
from common.entrypoint import (
    CommaList,
    DatabaseUrl,
    HttpUrl,
    LogLevel,
    OptionalHttpUrl,
    StartupError,
    https_or_loopback,
)
from common.settings_meta import deployed


class LoopSettings(BaseSettings):
    # compose passes a variable a site left unset as empty: empty means the default
    model_config = SettingsConfigDict(env_prefix="LOOP_", extra="ignore", env_ignore_empty=True)

    host: str = Field(
        "127.0.0.1",
        description="Interface to bind (`0.0.0.0` in containers).",
        json_schema_extra=deployed(configmap="0.0.0.0"),
    )
    port: int = Field(
        8080,
        ge=1,
        le=65535,
        description="Port of the loop API.",
        json_schema_extra=deployed(configmap=True),
    )
    model_base_url: HttpUrl = Field(
        "http://127.0.0.1:8000/v1",
        description="OpenAI-compatible endpoint (vLLM's router, or the simulator).",
        json_schema_extra=deployed(configmap="http://vllm-router:8000/v1"),
    )
    model_name: str = Field(
        "leave-copilot",
        description="Model name the loop asks for (the served name, or the LoRA adapter's).",
        json_schema_extra=deployed(env=True, configmap=True),
    )
    model_revision: str = Field(
        "",
        max_length=200,
        description=(
            "Which weights serve (compose: from `VLLM_MODEL_REVISION` or their "
            "fingerprint), exported as `leave_loop_model_info{model,revision} 1`."
        ),
    )
    model_api_key: SecretStr = Field(
        SecretStr("EMPTY"),
        description="Bearer key for the model endpoint (compose and Kubernetes: `VLLM_API_KEY`).",
        json_schema_extra=deployed(secret=True),
    )
    mcp_url: HttpUrl = Field(
        "http://127.0.0.1:8090/mcp",
        description="The leave MCP server.",
        json_schema_extra=deployed(configmap="http://mcp-server:8090/mcp"),
    )
    max_turns: int = Field(
        8,
        ge=1,
        le=64,
        description="Model turns per run.",
        json_schema_extra=deployed(env=True, configmap=True),
    )
    system_prompt: str = Field(
        SYSTEM_PROMPT,
        description="The system prompt: the three sentences the model was trained with.",
    )
    date_in_prompt: bool = Field(
        True,
        description=(
            "Append today's date (the host's local date, TZ, as the MCP server reads it) to "
            "the system prompt, so the model can turn 下週一 into a date; false for a fine-tune "
            "trained on the prompt alone that the line would confuse."
        ),
        json_schema_extra=deployed(env=True, configmap=True),
    )
    stop_tools: CommaList = Field(
        default_factory=list,
        description=(
            "Comma-separated tools whose call ends the run with its arguments as `result`."
        ),
    )
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int | None = Field(
        None,
        ge=1,
        description=(
            "`max_tokens` per model call; also what is kept free in the context for "
            "the answer (512 when unset)."
        ),
    )
    model_context_tokens: int | None = Field(
        None,
        ge=256,
        description=(
            "The model's context length; unset: `max_model_len` from the endpoint's `/v1/models`."
        ),
    )
    tool_result_max_tokens: int = Field(
        1024,
        ge=64,
        description=(
            "A longer tool result is cut to this (a list keeps valid JSON and says "
            "how much was left out)."
        ),
    )
    model_timeout_seconds: float = Field(60.0, gt=0, description="Timeout of each model call.")
    model_max_retries: int = Field(
        3, ge=0, le=10, description="Retries on 429 / 5xx / connection errors / timeouts."
    )
    model_retry_backoff_seconds: float = Field(
        0.5,
        ge=0,
        description="First backoff, doubled per retry (a `Retry-After` wins, capped at 30 s).",
    )
    tool_timeout_seconds: float = Field(
        30.0,
        gt=0,
        description=(
            "Timeout of each tool call (plus the confirmation timeout for destructive tools)."
        ),
    )
    mcp_connect_timeout_seconds: float = Field(
        10.0, gt=0, description="Timeout of opening an MCP connection."
    )
    confirmation_timeout_seconds: float = Field(
        120.0,
        gt=0,
        description="Seconds a confirmation waits for the person before it counts as cancelled.",
        json_schema_extra=deployed(env=True, configmap=True),
    )
    tool_concurrency: int = Field(4, ge=1, le=64, description="Tool calls of one turn run at once.")
    max_concurrent_runs: int = Field(
        64,
        ge=1,
        description="Runs executing at once (the rest wait); a run waiting for a person's "
        "confirmation does not count.",
        json_schema_extra=deployed(env=True, configmap=True),
    )
    session_max_messages: int = Field(
        40, ge=2, description="History stored per session (what is sent is bounded by tokens)."
    )
    store_url: DatabaseUrl = Field(
        "sqlite:///var/loop.db",
        description=(
            "Run records and sessions (SQLAlchemy URL): SQLite or PostgreSQL "
            "(`postgresql://…`). Compose: the SQLite file in the `loop-data` volume, "
            "or `postgresql://leave:${POSTGRES_PASSWORD}@postgres:5432/loop` with the"
            " `postgres` profile."
        ),
        json_schema_extra=deployed(env="sqlite:////data/loop.db", secret=True),
    )
    agent_model_name: str = Field(
        "leave-copilot-agent", description="Model name of the OpenAI-compatible facade."
    )
    task_model_name: str = Field(
        "leave-copilot-tasks",
        description=(
            "The facade's plain model for a chat front end's housekeeping (titles, tags, "
            "follow-up suggestions; Open WebUI's task model): the messages go straight to "
            "the model, without tools, the leave system or a run record."
        ),
    )
    task_max_tokens: int = Field(
        512,
        ge=16,
        le=8192,
        description=(
            "Most tokens the model writes for one housekeeping request (a smaller "
            "`max_tokens` in the request is honoured)."
        ),
    )
    otlp_traces_endpoint: OptionalHttpUrl = Field(
        None,
        description=(
            "OTLP/HTTP traces URL (`…/v1/traces`): each run as a trace "
            "(`invoke_agent`, `chat`, `execute_tool`, with the OpenTelemetry GenAI "
            "attributes), its `traceparent` sent on to the model and the MCP server; "
            "unset: no exporter (compose: `OTLP_TRACES_ENDPOINT`; "
            "[Traces](operations.md#traces))."
        ),
        json_schema_extra=deployed(configmap=True),
    )
    trace_log: bool = Field(
        False,
        description=(
            "Also log every span as one JSON line on the `loop.trace` logger (trace "
            "and parent ids, name, start, duration, attributes): traces without a "
            "collector."
        ),
    )
    max_header_bytes: int = Field(
        16384, ge=1024, description="Request headers larger than this in total → 431."
    )
    max_body_bytes: int = Field(
        1_048_576,
        ge=1024,
        description=(
            "Request bodies larger than this → 413, on every route, before the body "
            "is parsed (also one sent without `Content-Length`)."
        ),
    )
    rejected_token_cache_seconds: float = Field(
        30.0,
        ge=0,
        description=(
            "A token the MCP server refused (revoked, expired) is refused unasked "
            "this long: the most a revoked token keeps working through the loop (`0`:"
            " always ask)."
        ),
        json_schema_extra=deployed(env=True, configmap=True),
    )
    auth_failure_limit: int = Field(
        20,
        ge=1,
        description=(
            "Failed authentications per client address per window; more → 429 with `Retry-After`."
        ),
    )
    auth_failure_window_seconds: float = Field(
        60.0, gt=0, description="The window of `LOOP_AUTH_FAILURE_LIMIT`."
    )
    instance_id: str | None = Field(
        None,
        max_length=128,
        description=(
            "This loop's name on a store other loops share: the runs it starts are "
            "its own; stable across its restarts (a container's host name is its "
            "own), distinct for two loops on one host."
        ),
        json_schema_extra=deployed(shown_default="host name:port"),
    )
    peer_url: str | None = Field(
        None,
        max_length=512,
        pattern=r"^(auto|https?://[^/?#\s]+/?)$",
        description=(
            "Where the other loop replicas on this store reach this one: a confirmation's "
            "answer, a cancel, a read of a waiting run or a chat front end's yes or no that "
            "lands on a replica not holding the run is sent on to the one that does. `auto`: "
            "http://(this host's address):`LOOP_PORT` (its name's, else the default route's "
            "interface's), a pod's IP on Kubernetes; or a URL "
            "(`http://10.0.3.7:8080`). Unset: that replica refuses it (404, or 503 to a chat "
            "front end)."
        ),
        json_schema_extra=deployed(configmap="auto", shown_default="unset"),
    )
    lease_seconds: float = Field(
        30.0,
        ge=1,
        description=(
            "A loop renews its lease a third of this apart; one that stops renewing "
            "this long (it died and did not come back) has its running runs marked "
            "interrupted by the others (those waiting for a confirmation are taken "
            "over instead); set the same on every loop of a store."
        ),
    )
    log_level: LogLevel = Field(
        "info",
        description="The loop's log level.",
        json_schema_extra=deployed(env=True, configmap=True),
    )
    # The chat page's sign-in (loop/api/chat_page.py, docs/chat-page.md).
    chat_oidc_issuer: OptionalHttpUrl = Field(
        None,
        description=(
            "The chat page's sign-in: the company's identity provider, exactly as "
            "`MCP_OIDC_ISSUER` (OpenID Connect, authorization code with PKCE, in the "
            "browser; `https://`, or `http://` on this host); unset: the demo "
            "employees, see `LOOP_CHAT_DEMO_SIGN_IN` ([Chat page](chat-page.md))."
        ),
        json_schema_extra=deployed(env=True, configmap=True),
    )
    chat_oidc_client_id: str | None = Field(
        None,
        max_length=200,
        description=(
            "The page's client id at that provider: a public client (no secret), "
            "PKCE S256, redirect URI the page's own URL; required with the issuer."
        ),
        json_schema_extra=deployed(env=True, configmap=True),
    )
    chat_oidc_scopes: str = Field(
        "openid profile",
        max_length=1000,
        description=(
            "Scopes the page asks for, space-separated (`openid` among them); add what "
            "your provider needs for a refresh token (`offline_access`) or for an access "
            "token the MCP server takes (an API scope)."
        ),
        json_schema_extra=deployed(env=True, configmap=True),
    )
    chat_oidc_resource: str | None = Field(
        None,
        max_length=1000,
        description=(
            "The `resource` (RFC 8707) the page asks its access token for, usually "
            "`MCP_OIDC_AUDIENCE`; unset: none is sent (providers that take the audience "
            "from the scopes)."
        ),
        json_schema_extra=deployed(env=True, configmap=True),
    )
    chat_demo_sign_in: bool = Field(
        True,
        description=(
            "Without `LOOP_CHAT_OIDC_ISSUER` the page offers the demo employees (their "
            "tokens work only while the MCP server is not in production); `false`: it "
            "says sign-in is not set up."
        ),
        json_schema_extra=deployed(env=True, configmap="false"),
    )

    @model_validator(mode="after")
    def _complete_chat_sign_in(self) -> LoopSettings:
        issuer = self.chat_oidc_issuer
        if issuer is None:
            return self
        if not self.chat_oidc_client_id:
            raise ValueError("LOOP_CHAT_OIDC_ISSUER needs LOOP_CHAT_OIDC_CLIENT_ID")
        if "openid" not in self.chat_oidc_scopes.split():
            raise ValueError("LOOP_CHAT_OIDC_SCOPES must include openid")
        # the page sends its PKCE verifier there and gets tokens back
        if not https_or_loopback(issuer):
            raise ValueError(
                "LOOP_CHAT_OIDC_ISSUER must be https:// (http:// only to this host: "
                "localhost, 127.0.0.1, ::1)"
            )
        return self

    def peer_address(self) -> str | None:
        """LOOP_PEER_URL as the other loops are to use it (`auto` resolved)."""
        if self.peer_url != "auto":
            return self.peer_url
        try:
            return f"http://{own_address()}:{self.port}"
        except OSError as error:
            raise StartupError(
                f"LOOP_PEER_URL: auto: this host has no address the others could reach "
                f"({error}); give the URL instead"
            ) from None

    @property
    def identity(self) -> str:
        """Stable across restarts of the same loop (so it recognises its own runs), distinct
        for two loops on one host (they listen on different ports)."""
        return self.instance_id or f"{socket.gethostname()}:{self.port}"


def own_address() -> str:
    """This host's address as the others on its network reach it: its name's (a pod's IP on
    Kubernetes), unless that is a loopback one (podman maps a container's name to 127.0.0.1),
    then the address of the interface its default route leaves by."""
    try:
        named = socket.gethostbyname(socket.gethostname())
    except OSError:
        named = "127.0.0.1"
    if not ipaddress.ip_address(named).is_loopback:
        return named
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # UDP: nothing is sent, the kernel only picks a route
        address: str = probe.getsockname()[0]
    return address
