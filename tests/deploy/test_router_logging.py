"""The router's log in production: compose's default log level (and the Kubernetes router's,
which the drift test holds equal) writes nothing per model call; `info` writes lines for each,
and so does `warning`, which vllm-router 0.1.17 accepts and logs as info (so the default is
`error`; when this pin test fails, an upgrade made `warning` quiet: reconsider the default)."""

from __future__ import annotations

import httpx
import pytest

from harness.router import vllm_router
from ops import compose
from ops import services as processes
from tests.support import REPO_ROOT

CALLS = 5


def _calls_through(router: str) -> None:
    for index in range(CALLS):
        answer = httpx.post(
            f"{router}/v1/chat/completions",
            json={
                "model": "leave-copilot",
                "messages": [{"role": "user", "content": f"hello {index}"}],
                "max_tokens": 4,
            },
            headers={"x-session-id": f"session-{index}"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text


def _lines_per_call(tmp_path, **flags: str) -> float:
    with (
        processes.model_simulator(tmp_path, profile="instant") as worker,
        vllm_router(tmp_path, [worker], **flags) as (router, _),
    ):
        log = next(tmp_path.glob("router-*.log"))
        _calls_through(router)  # connections and the hash ring warmed up
        before = len(log.read_text(errors="replace").splitlines())
        _calls_through(router)
        after = len(log.read_text(errors="replace").splitlines())
    return (after - before) / CALLS


@pytest.fixture
def router_binary():
    if not (REPO_ROOT / ".venv" / "bin" / "vllm-router").exists():
        pytest.skip("vllm-router is not installed (make install)")


def test_composes_router_default_is_error():
    command = compose.config(sim=True, environ={})["services"]["vllm-router"]["command"]
    assert "--log-level=error" in command
    # the same default when deploy/.env does not set it
    assert "--log-level=${VLLM_ROUTER_LOG_LEVEL:-error}" in compose.BASE_FILE.read_text()


def test_the_default_level_logs_nothing_per_model_call(tmp_path, router_binary):
    assert _lines_per_call(tmp_path) == 0


@pytest.mark.parametrize("level", ["info", "warning"])
def test_info_and_warning_log_every_model_call(tmp_path, router_binary, level):
    """The other side: the measure above sees the per-call lines when they are there."""
    assert _lines_per_call(tmp_path, log_level=level) >= 1
