"""Settings of the leave MCP server, read once from `MCP_*` environment variables."""

from __future__ import annotations

import math
from collections import Counter
from difflib import SequenceMatcher
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from common.entrypoint import (
    CommaList,
    DatabaseUrl,
    HttpUrl,
    LogLevel,
    OptionalHttpUrl,
    https_or_loopback,
)
from common.settings_meta import deployed

# The development key deploy/.env.example ships; production refuses it (and any placeholder).
DEVELOPMENT_STATE_KEY = "dev-elicitation-state-key-not-for-production-use-000000"
# Placeholders shipped in examples; a production server refuses to start with any of them.
KNOWN_DEFAULT_SECRETS = frozenset({DEVELOPMENT_STATE_KEY})

MIN_KEY_CHARACTERS = 32
MIN_DISTINCT_CHARACTERS = 8
# Estimated from the key's own character counts (Shannon): 32 random hex digits, the least a
# key may be, score 93 bits at worst in 10,000 draws; `a` × 32 scores 0.
MIN_ESTIMATED_BITS = 80
# A key this like a shipped placeholder (difflib's ratio: 1.0 the same) is that placeholder
# edited, not a secret.
MAX_LIKENESS_TO_DEFAULT = 0.75
LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


def weakness(key: str) -> str | None:
    """Why `key` is no fit secret for production, in words that do not repeat it; None: fit."""
    if len(key) < MIN_KEY_CHARACTERS:
        return f"is shorter than {MIN_KEY_CHARACTERS} characters"
    if any(
        SequenceMatcher(None, key.lower(), default).ratio() >= MAX_LIKENESS_TO_DEFAULT
        for default in KNOWN_DEFAULT_SECRETS
    ):
        return "is the example key shipped in deploy/.env.example, or that key edited"
    counts = Counter(key)
    bits = -sum(n * math.log2(n / len(key)) for n in counts.values())
    if len(counts) < MIN_DISTINCT_CHARACTERS or bits < MIN_ESTIMATED_BITS:
        return "is too easy to guess (too few different characters, or too regular)"
    return None


class ServerSettings(BaseSettings):
    # compose passes a variable a site left unset as empty: empty means the default
    model_config = SettingsConfigDict(env_prefix="MCP_", extra="ignore", env_ignore_empty=True)

    host: str = Field(
        "127.0.0.1",
        description="Interface to bind (`0.0.0.0` in containers).",
        json_schema_extra=deployed(configmap="0.0.0.0"),
    )
    port: int = Field(
        8090,
        ge=1,
        le=65535,
        description="Port of the MCP server.",
        json_schema_extra=deployed(configmap=True),
    )
    database_url: DatabaseUrl = Field(
        "sqlite:///var/leave.db",
        description=(
            "The leave database (SQLAlchemy URL): SQLite (WAL mode, "
            "`synchronous=NORMAL`) or PostgreSQL, "
            "`postgresql://user:password@host:5432/db` (the psycopg 3 driver is "
            "installed; the same tests pass on both). Compose: the SQLite file in the"
            " `mcp-data` volume, or "
            "`postgresql://leave:${POSTGRES_PASSWORD}@postgres:5432/leave` with the "
            "`postgres` profile."
        ),
        json_schema_extra=deployed(env="sqlite:////data/leave.db", secret=True),
    )
    env: Literal["development", "production"] = Field(
        "development",
        description=(
            "`production` refuses demo tokens and default secrets, and its seed job "
            "writes no demo data."
        ),
        json_schema_extra=deployed(env=True, configmap="production"),
    )
    language: Literal["zh-TW", "en"] = Field(
        "zh-TW",
        description="Language of the tool messages the model reads: `zh-TW` or `en`.",
        json_schema_extra=deployed(env=True, configmap=True),
    )
    allowed_hosts: CommaList = Field(
        default_factory=lambda: list(LOOPBACK_HOSTS),
        description=(
            "Comma-separated Host headers the DNS-rebinding guard accepts; compose "
            "and Kubernetes add `mcp-server:8090`."
        ),
        json_schema_extra=deployed(configmap="mcp-server:8090,127.0.0.1:*,localhost:*"),
    )
    allowed_origins: CommaList = Field(
        default_factory=lambda: list(LOOPBACK_ORIGINS),
        description="Comma-separated Origin headers accepted.",
    )
    elicitation_state_key: SecretStr | None = Field(
        None,
        description=(
            "Seals confirmation state between requests: 32+ random characters, e.g. "
            '`python -c "import secrets; print(secrets.token_hex(32))"` (production '
            "refuses a short, guessable or shipped key: [Production "
            "mode](operations.md#production-mode)); share it across replicas; a "
            "comma-separated ring to rotate: the first seals, all open "
            "([secrets](operations.md#secrets)). Unset: a key per process "
            "(development only)."
        ),
        json_schema_extra=deployed(env=DEVELOPMENT_STATE_KEY, secret=True),
    )
    confirmation_ttl_seconds: float = Field(
        600.0,
        gt=0,
        description=(
            "How long a confirmation's answer is accepted; an unanswered one is then "
            "audited as `abandoned`."
        ),
    )
    public_url: HttpUrl | None = Field(
        None,
        description=(
            "External base URL, used in the OAuth resource metadata; unset: `http://HOST:PORT`."
        ),
        json_schema_extra=deployed(configmap="http://mcp-server:8090"),
    )
    # Single sign-on (mcp_server/oidc.py): set the issuer to take the company's access tokens.
    oidc_issuer: HttpUrl | None = Field(
        None,
        description=(
            "Single sign-on: the identity provider whose JWT access tokens are taken "
            "(`iss`; `https://` in production, as the JWKS URL); unset: only the "
            "tokens the leave system issued "
            "([Operations](operations.md#single-sign-on))."
        ),
        json_schema_extra=deployed(env=True, configmap=True),
    )
    oidc_audience: str | None = Field(
        None,
        description=(
            "What a token's `aud` must be, usually the MCP server's URL; required with the issuer."
        ),
        json_schema_extra=deployed(env=True, configmap=True),
    )
    oidc_jwks_url: HttpUrl | None = Field(
        None,
        description="Where the provider publishes its signing keys; required with the issuer.",
        json_schema_extra=deployed(env=True, configmap=True),
    )
    oidc_employee_claim: str = Field(
        "employee_id",
        description="The claim that holds the employee id (as imported).",
        json_schema_extra=deployed(env=True, configmap=True),
    )
    oidc_algorithms: CommaList = Field(
        default_factory=lambda: ["RS256", "ES256"],
        description="Signature algorithms taken; `none` and HS* are refused.",
        json_schema_extra=deployed(env=True, configmap=True),
    )
    oidc_jwks_refresh_seconds: float = Field(
        300.0,
        gt=0,
        description="How often the keys are fetched again.",
        json_schema_extra=deployed(env=True, configmap=True),
    )
    oidc_jwks_max_stale_seconds: float = Field(
        3600.0,
        gt=0,
        description=(
            "How long held keys keep working while the JWKS URL does not answer; "
            "after it sign-ins are 503."
        ),
        json_schema_extra=deployed(env=True, configmap=True),
    )
    max_header_bytes: int = Field(
        16384,
        ge=1024,
        description=(
            "Request headers larger than this in total → 431, before anything reads "
            "them (as `LOOP_MAX_HEADER_BYTES`; raise both together)."
        ),
    )
    otlp_traces_endpoint: OptionalHttpUrl = Field(
        None,
        description=(
            "OTLP/HTTP traces URL (`…/v1/traces`): a span per MCP request, continuing"
            " the caller's trace (from the request's `_meta` or its `traceparent` "
            "header); unset: none (compose: `OTLP_TRACES_ENDPOINT`)."
        ),
        json_schema_extra=deployed(configmap=True),
    )
    log_level: LogLevel = Field(
        "info",
        description="The MCP server's log level.",
        json_schema_extra=deployed(env=True, configmap=True),
    )

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
        for number, key in enumerate(keys, start=1):
            weak = weakness(key)
            if weak:  # which key of the ring, never the key itself
                which = f"key {number} of {len(keys)}" if len(keys) > 1 else "the key"
                raise ValueError(
                    f"MCP_ELICITATION_STATE_KEY: {which} {weak}; make one with: python -c "
                    '"import secrets; print(secrets.token_hex(32))"'
                )
        if any(h.strip() in {"*", "*:*"} for h in self.allowed_hosts):
            raise ValueError("MCP_ALLOWED_HOSTS may not contain a bare wildcard in production")
        for name, url in (
            ("MCP_OIDC_ISSUER", self.oidc_issuer),
            ("MCP_OIDC_JWKS_URL", self.oidc_jwks_url),
        ):
            if url and not https_or_loopback(url):
                raise ValueError(
                    f"{name} must be an https:// URL in production: over http:// the provider's "
                    "keys can be swapped on the way, and with them anyone signs in (http:// is "
                    "taken only for this host: localhost, 127.0.0.1, ::1)"
                )
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
