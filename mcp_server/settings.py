"""Settings of the leave MCP server, read once from `MCP_*` environment variables."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from common.entrypoint import CommaList, DatabaseUrl, HttpUrl, LogLevel, OptionalHttpUrl

# Placeholders shipped in examples; a production server refuses to start with any of them.
KNOWN_DEFAULT_SECRETS = frozenset({"dev-elicitation-state-key-not-for-production-use-000000"})

LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


class ServerSettings(BaseSettings):
    # compose passes a variable a site left unset as empty: empty means the default
    model_config = SettingsConfigDict(env_prefix="MCP_", extra="ignore", env_ignore_empty=True)

    host: str = Field("127.0.0.1", description="Interface to bind; 0.0.0.0 only in containers.")
    port: int = Field(8090, ge=1, le=65535)
    database_url: DatabaseUrl = Field("sqlite:///var/leave.db", description="SQLAlchemy URL.")
    env: Literal["development", "production"] = "development"
    language: Literal["zh-TW", "en"] = Field("zh-TW", description="Language of tool messages.")
    # Host headers the DNS-rebinding guard accepts; add the compose service name or proxy host.
    allowed_hosts: CommaList = Field(
        default_factory=lambda: list(LOOPBACK_HOSTS), description="Comma-separated."
    )
    allowed_origins: CommaList = Field(
        default_factory=lambda: list(LOOPBACK_ORIGINS), description="Comma-separated."
    )
    # Seals elicitation state between rounds; share it across workers/replicas. Comma-separated
    # to rotate: the first key seals, every key opens (docs/operations.md#secrets).
    elicitation_state_key: SecretStr | None = None
    confirmation_ttl_seconds: float = Field(
        600.0,
        gt=0,
        description="An unanswered confirmation expires, and is audited as abandoned, after this.",
    )
    public_url: HttpUrl | None = Field(
        None, description="Externally visible base URL, used in auth metadata."
    )
    # Single sign-on (mcp_server/oidc.py): set the issuer to take the company's access tokens.
    oidc_issuer: HttpUrl | None = Field(
        None, description="The identity provider (iss); unset: no single sign-on."
    )
    oidc_audience: str | None = Field(None, description="What its tokens must name as aud.")
    oidc_jwks_url: HttpUrl | None = Field(None, description="Where it publishes its keys.")
    oidc_employee_claim: str = Field("employee_id", description="The claim naming the employee.")
    oidc_algorithms: CommaList = Field(
        default_factory=lambda: ["RS256", "ES256"], description="Signature algorithms taken."
    )
    oidc_jwks_refresh_seconds: float = Field(300.0, gt=0)
    oidc_jwks_max_stale_seconds: float = Field(
        3600.0, gt=0, description="Keys held keep working this long when the JWKS URL is down."
    )
    max_header_bytes: int = Field(
        16384, ge=1024, description="Larger request headers → 431 (the loop's limit too)."
    )
    otlp_traces_endpoint: OptionalHttpUrl = Field(
        None, description="OTLP/HTTP traces URL (…/v1/traces); unset: no traces exported."
    )
    log_level: LogLevel = "info"

    @model_validator(mode="after")
    def _complete_sign_in(self) -> ServerSettings:
        if self.oidc_issuer is None:
            return self
        if not self.oidc_audience or not self.oidc_jwks_url:
            raise ValueError("MCP_OIDC_ISSUER needs MCP_OIDC_AUDIENCE and MCP_OIDC_JWKS_URL")
        unsafe = [a for a in self.oidc_algorithms if a.lower() == "none" or a.startswith("HS")]
        if unsafe or not self.oidc_algorithms:
            raise ValueError(
                "MCP_OIDC_ALGORITHMS takes asymmetric algorithms (RS256, ES256, …), "
                f"not {', '.join(unsafe) or 'none at all'}"
            )
        return self

    @model_validator(mode="after")
    def _refuse_unsafe_production(self) -> ServerSettings:
        if self.env != "production":
            return self
        keys = self.elicitation_state_keys
        if not keys or any(key in KNOWN_DEFAULT_SECRETS for key in keys):
            raise ValueError(
                "MCP_ENV=production needs MCP_ELICITATION_STATE_KEY set to a fresh secret "
                '(python -c "import secrets; print(secrets.token_hex(32))")'
            )
        if any(len(key) < 32 for key in keys):
            raise ValueError("MCP_ELICITATION_STATE_KEY: each key must be at least 32 characters")
        if any(h.strip() in {"*", "*:*"} for h in self.allowed_hosts):
            raise ValueError("MCP_ALLOWED_HOSTS may not contain a bare wildcard in production")
        return self

    @property
    def elicitation_state_keys(self) -> list[str]:
        """The key ring, sealing key first; empty: a key per process (development only)."""
        ring = self.elicitation_state_key.get_secret_value() if self.elicitation_state_key else ""
        return [key.strip() for key in ring.split(",") if key.strip()]

    @property
    def is_production(self) -> bool:
        return self.env == "production"

    @property
    def base_url(self) -> str:
        return self.public_url or f"http://{self.host}:{self.port}"
