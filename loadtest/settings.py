"""Load-test settings (`LOAD_*` variables; `python -m loadtest` flags override them)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .results import Slo

# `user_classes` names → the Locust user classes in loadtest/locustfile.py
USER_CLASSES = {"agent": "AgentUser", "model": "ModelUser", "facade": "FacadeUser"}


class LoadSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LOAD_", extra="ignore")

    loop_url: str = "http://127.0.0.1:8080"
    model_url: str = Field("http://127.0.0.1:8000/v1", description="vLLM's OpenAI base URL.")
    token: str = "demo-token-employee"
    user_classes: str = Field(
        "agent,model", description="Which users run, comma-separated: agent, model, facade."
    )
    shape: Literal["constant", "steps"] = "constant"
    users: int = Field(4, ge=1, description="constant: users; steps: users of the first step")
    step_users: int = Field(4, ge=1, description="users added per step")
    steps: int = Field(5, ge=1)
    step_seconds: float = Field(20.0, gt=0)
    duration_seconds: float = Field(30.0, gt=0, description="constant shape only")
    spawn_rate: float = Field(50.0, gt=0)
    think_seconds: float = Field(1.0, ge=0, description="mean pause between an agent's runs")
    model_think_seconds: float = Field(0.0, ge=0)
    max_tokens: int = Field(256, ge=1, description="max_tokens of the model user's requests")
    results_dir: str = "var/loadtest"
    slo_ttft_p99_ms: float = Field(200.0, gt=0)
    slo_itl_p99_ms: float = Field(50.0, gt=0)
    slo_run_p95_ms: float = Field(5000.0, gt=0)
    slo_facade_run_p95_ms: float = Field(
        5000.0, gt=0, description="run latency p95 through the chat-completions facade"
    )
    slo_max_error_ratio: float = Field(0.0, ge=0, le=1)

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

    def schedule(self) -> list[tuple[float, int]]:
        """(seconds from the start, users) for each step; the test ends after the last."""
        if self.shape == "constant":
            return [(0.0, self.users)]
        return [
            (k * self.step_seconds, self.users + k * self.step_users) for k in range(self.steps)
        ]

    def total_seconds(self) -> float:
        if self.shape == "constant":
            return self.duration_seconds
        return self.steps * self.step_seconds
