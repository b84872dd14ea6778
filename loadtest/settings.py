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
DEMO_TOKEN, DEMO_MANAGER_TOKEN = "demo-token-employee", "demo-token-manager"
# `user_classes` names → the Locust user classes in loadtest/locustfile.py
USER_CLASSES = {"agent": "AgentUser", "model": "ModelUser", "facade": "FacadeUser"}


class Step(NamedTuple):
    offset: float  # seconds from the start of the test
    users: int
    phase: str | None = None  # the spike shape's baseline, spike and recovery


class LoadSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LOAD_", extra="ignore")

    loop_url: str = Field(
        "",
        description=(
            "The loop's base URL; empty: the running local stack's (`.run/urls.json`,"
            f" which follows `LOOP_PUBLISHED_PORT`), else {DEFAULT_LOOP_URL}. "
            "Nothing answering where the chosen users need it ends the run at once, "
            "one line naming the URL."
        ),
    )
    model_url: str = Field(
        "",
        description=(
            "vLLM's OpenAI base URL, for the model users and to ask what serves the "
            "load; empty: the running local stack's (which follows "
            f"`LOCAL_MODEL_PORT`), else {DEFAULT_MODEL_URL}."
        ),
    )
    mcp_url: str = Field(
        "",
        description=(
            "The MCP server, on which agent and facade users make their own leaves; "
            "empty: the running local stack's (which follows `MCP_PUBLISHED_PORT`), "
            f"else {DEFAULT_MCP_URL}."
        ),
    )
    token: str = Field(
        DEMO_TOKEN,
        description=(
            "The employee the agent and facade users act as (bearer token); a token that is "
            "not a demo token is refused without `--allow-real-employee`."
        ),
    )
    manager_token: str = Field(
        DEMO_MANAGER_TOKEN,
        description=(
            "That employee's manager: approves the users' own leaves, rejects what a submit left."
        ),
    )
    employees: Literal["auto", "own", "token"] = Field(
        "auto",
        description=(
            "Whom the users act as: `own` — a manager and an employee made for the run by "
            "`LOAD_ADMIN_COMMAND` and removed with their leaves and tokens after it; `token` "
            "— `LOAD_TOKEN` and `LOAD_MANAGER_TOKEN`; `auto` — the demo tokens where the MCP "
            "server takes them (development), else `own` (production)."
        ),
    )
    admin_command: str = Field(
        "",
        description=(
            "How to run the MCP server's operator commands on its database, for `own` "
            "employees (e.g. `docker compose … exec -T mcp-server python -m mcp_server`); "
            "empty: `python -m mcp_server` here, with this shell's `MCP_*` settings."
        ),
    )
    allow_real_employee: bool = Field(
        False,
        description=(
            "Act as the person whose token `LOAD_TOKEN` is, writing load-test leaves into "
            "their history and audit log (refused without it)."
        ),
    )
    # The default is the sweep `make demo` ends with: agent users, 2 to 8, back to back (no
    # think time), so that both measure the same capacity at the SLO.
    user_classes: str = Field(
        "agent",
        description=(
            "Which users run, comma-separated: `agent` (runs API), `facade` (the "
            "loop's chat-completions facade), `model` (vLLM directly)."
        ),
    )
    shape: Literal["constant", "steps", "spike"] = Field(
        "steps",
        description=(
            "`steps`, `constant` (`LOAD_USERS` for `LOAD_DURATION_SECONDS`) or "
            "`spike` ([shapes](loadtest.md#the-shapes))."
        ),
    )
    users: int = Field(
        2,
        ge=1,
        description="Constant: the users; steps: the first step's users; spike: the baseline.",
    )
    step_users: int = Field(
        2,
        ge=1,
        description=(
            "Steps: users added per step (the default sweep: 2, 4, 6, 8 users, the "
            "one `make demo` ends with)."
        ),
    )
    steps: int = Field(4, ge=1, description="Steps: how many.")
    step_seconds: float = Field(8.0, gt=0, description="Steps: how long each lasts.")
    stop_at_break: bool = Field(
        True, description="Steps: end the sweep after the first step that misses the SLO."
    )
    duration_seconds: float = Field(
        30.0,
        gt=0,
        description=(
            "Constant and spike: the whole length (with the steps shape it is "
            "refused: it would do nothing)."
        ),
    )
    spike_factor: float = Field(4.0, gt=1, description="Spike: users × this during the spike.")
    spike_start_seconds: float = Field(10.0, gt=0, description="Spike: the baseline before it.")
    spike_seconds: float = Field(
        10.0,
        gt=0,
        description="Spike: how long it lasts (it must end before `LOAD_DURATION_SECONDS`).",
    )
    spawn_rate: float = Field(50.0, gt=0, description="Users started per second.")
    think_seconds: float = Field(
        0.0,
        ge=0,
        description=(
            "Mean pause between an agent's runs (0: back to back, which is what "
            "measures capacity; a pause models a population of people)."
        ),
    )
    model_think_seconds: float = Field(
        0.0, ge=0, description="Mean pause between a model user's requests."
    )
    max_tokens: int = Field(256, ge=1, description="The model user's `max_tokens`.")
    results_dir: str = Field("var/loadtest", description="Where result folders go.")
    prometheus_url: str = Field(
        "",
        description=(
            "Prometheus for each step's GPU busy, vLLM TTFT p95 and KV-cache figures;"
            " empty: `make dev`'s while it runs; `off`: none."
        ),
    )
    web_port: int = Field(
        0,
        ge=0,
        le=65535,
        description=(
            "Serve Locust's web UI on this port during the run (`0`: headless); the "
            "run ends with the shape or on Ctrl-C, and writes the summary."
        ),
    )
    web_host: str = Field("127.0.0.1", description="Interface the web UI binds to.")
    # the bundle's service level (common/slo.py), which the alerts and dashboards use too
    slo_ttft_p99_ms: float = Field(
        slo.TTFT_P99_SECONDS * 1000, gt=0, description="SLO: time to first token, p99."
    )
    slo_itl_p99_ms: float = Field(
        slo.ITL_P99_SECONDS * 1000, gt=0, description="SLO: gap between tokens, p99."
    )
    slo_run_p95_ms: float = Field(
        slo.RUN_P95_SECONDS * 1000, gt=0, description="SLO: run latency, p95."
    )
    slo_facade_run_p95_ms: float = Field(
        slo.RUN_P95_SECONDS * 1000,
        gt=0,
        description="SLO: run latency p95 through the chat-completions facade.",
    )
    slo_max_error_ratio: float = Field(
        slo.MAX_ERROR_RATIO,
        ge=0,
        le=1,
        description="Errors a step may have and still meet the SLO.",
    )

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
