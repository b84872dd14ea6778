"""Load-test settings (`LOAD_*` variables; `python -m loadtest` flags override them)."""

from __future__ import annotations

from typing import Literal, NamedTuple

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from common import slo

from .results import Slo

DEFAULT_LOOP_URL = "http://127.0.0.1:8080"
DEFAULT_MODEL_URL = "http://127.0.0.1:8000/v1"
DEFAULT_MCP_URL = "http://127.0.0.1:8090/mcp"
# `user_classes` names → the Locust user classes in loadtest/locustfile.py
USER_CLASSES = {"agent": "AgentUser", "model": "ModelUser", "facade": "FacadeUser"}


class Step(NamedTuple):
    offset: float  # seconds from the start of the test
    users: int
    phase: str | None = None  # the spike shape's baseline, spike and recovery


class LoadSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LOAD_", extra="ignore")

    # Empty: the running local stack's (make dev, make demo: .run/), else the default port.
    loop_url: str = Field(
        "", description=f"the loop's base URL (empty: the local stack's, else {DEFAULT_LOOP_URL})"
    )
    model_url: str = Field(
        "",
        description="vLLM's OpenAI base URL, also asked what serves (empty: the local stack's, "
        f"else {DEFAULT_MODEL_URL})",
    )
    mcp_url: str = Field(
        "",
        description="the MCP server on which agent and facade users make their own leaves "
        f"(empty: the local stack's, else {DEFAULT_MCP_URL})",
    )
    token: str = Field("demo-token-employee", description="the employee every user acts as")
    manager_token: str = Field(
        "demo-token-manager", description="their manager: approves the users' own leaves"
    )
    # The default is the sweep `make demo` ends with: agent users, 2 to 8, back to back (no
    # think time), so that both measure the same capacity at the SLO.
    user_classes: str = Field(
        "agent", description="Which users run, comma-separated: agent, model, facade."
    )
    shape: Literal["constant", "steps", "spike"] = "steps"
    users: int = Field(
        2, ge=1, description="constant: users; steps: users of the first step; spike: baseline"
    )
    step_users: int = Field(2, ge=1, description="users added per step")
    steps: int = Field(4, ge=1)
    step_seconds: float = Field(8.0, gt=0)
    stop_at_break: bool = Field(
        True, description="steps: end the sweep after the first step that misses the SLO"
    )
    duration_seconds: float = Field(30.0, gt=0, description="constant and spike shapes")
    spike_factor: float = Field(4.0, gt=1, description="spike: users × this during the spike")
    spike_start_seconds: float = Field(10.0, gt=0, description="spike: baseline before it")
    spike_seconds: float = Field(10.0, gt=0, description="spike: how long it lasts")
    spawn_rate: float = Field(50.0, gt=0)
    think_seconds: float = Field(
        0.0,
        ge=0,
        description="mean pause between an agent's runs (0: back to back, which measures "
        "capacity; a person's pause models a population of users)",
    )
    model_think_seconds: float = Field(0.0, ge=0)
    max_tokens: int = Field(256, ge=1, description="max_tokens of the model user's requests")
    results_dir: str = "var/loadtest"
    prometheus_url: str = Field(
        "",
        description="Prometheus for each step's server-side figures; empty: make dev's while "
        "it runs; off: none",
    )
    web_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="serve Locust's web UI on this port during the run (0: headless); "
        "the run ends with the shape or on Ctrl-C, and writes the summary",
    )
    web_host: str = Field("127.0.0.1", description="interface the web UI binds to")
    # the bundle's service level (common/slo.py), which the alerts and dashboards use too
    slo_ttft_p99_ms: float = Field(slo.TTFT_P99_SECONDS * 1000, gt=0)
    slo_itl_p99_ms: float = Field(slo.ITL_P99_SECONDS * 1000, gt=0)
    slo_run_p95_ms: float = Field(slo.RUN_P95_SECONDS * 1000, gt=0)
    slo_facade_run_p95_ms: float = Field(
        slo.RUN_P95_SECONDS * 1000,
        gt=0,
        description="run latency p95 through the chat-completions facade",
    )
    slo_max_error_ratio: float = Field(slo.MAX_ERROR_RATIO, ge=0, le=1)

    @field_validator("user_classes")
    @classmethod
    def _known_classes(cls, value: str) -> str:
        names = [c.strip() for c in value.split(",") if c.strip()]
        unknown = [c for c in names if c not in USER_CLASSES]
        if unknown or not names:
            raise ValueError(f"expected some of {', '.join(USER_CLASSES)}, got {value!r}")
        return ",".join(names)

    def user_class_names(self) -> list[str]:
        """The Locust class names of `user_classes`."""
        return [USER_CLASSES[c] for c in self.user_classes.split(",")]

    def slo(self) -> Slo:
        return Slo(
            self.slo_ttft_p99_ms,
            self.slo_itl_p99_ms,
            self.slo_run_p95_ms,
            self.slo_max_error_ratio,
            self.slo_facade_run_p95_ms,
        )

    @model_validator(mode="after")
    def _spike_fits(self) -> LoadSettings:
        if self.shape == "spike" and self.spike_start_seconds + self.spike_seconds >= (
            self.duration_seconds
        ):
            raise ValueError(
                f"the spike ends at {self.spike_start_seconds + self.spike_seconds:g} s "
                "(spike_start_seconds + spike_seconds), not before duration_seconds "
                f"({self.duration_seconds:g} s): no baseline after it to recover in"
            )
        return self

    def ignored(self) -> str | None:
        """Why a setting given (flag or variable) would do nothing with this shape, if one
        would: --duration-seconds without a shape once meant the constant shape."""
        if "duration_seconds" in self.model_fields_set and self.shape == "steps":
            return (
                "--duration-seconds / LOAD_DURATION_SECONDS: the length of the constant and "
                "spike shapes; the steps shape (the default) lasts steps × step_seconds: add "
                "--shape constant"
            )
        return None

    def schedule(self) -> list[Step]:
        """Each step's start (seconds from the test's start), users and phase; the test ends
        `total_seconds()` after the start."""
        if self.shape == "constant":
            return [Step(0.0, self.users)]
        if self.shape == "spike":
            peak = max(self.users + 1, round(self.users * self.spike_factor))
            end = self.spike_start_seconds + self.spike_seconds
            return [
                Step(0.0, self.users, "baseline"),
                Step(self.spike_start_seconds, peak, "spike"),
                Step(end, self.users, "recovery"),
            ]
        return [
            Step(k * self.step_seconds, self.users + k * self.step_users) for k in range(self.steps)
        ]

    def total_seconds(self) -> float:
        if self.shape == "steps":
            return self.steps * self.step_seconds
        return self.duration_seconds
