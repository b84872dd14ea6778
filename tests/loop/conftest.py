from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from common import sse
from tests.support import free_port, mcp_server, model_simulator, running

EMPLOYEE = {"Authorization": "Bearer demo-token-employee"}
OTHER = {"Authorization": "Bearer demo-token-other"}
MANAGER = {"Authorization": "Bearer demo-token-manager"}


@dataclass
class Stack:
    loop: str
    mcp: str
    model: str
    store_url: str
    mcp_db_url: str
    workdir: Path


@contextmanager
def loop_service(
    workdir: Path, model_url: str, mcp_url: str, store_url: str | None = None, **env: str
) -> Iterator[tuple[str, str]]:
    """`python -m loop` on a free port (its store at `store_url`, else a new SQLite file);
    yields (base URL, store URL)."""
    port = free_port()
    store_url = store_url or f"sqlite:///{workdir / f'loop-{port}.db'}"
    settings = {
        "LOOP_PORT": str(port),
        "LOOP_MODEL_BASE_URL": model_url,
        "LOOP_MCP_URL": mcp_url,
        "LOOP_STORE_URL": store_url,
        **{f"LOOP_{k.upper()}": v for k, v in env.items()},
    }
    base = f"http://127.0.0.1:{port}"
    with running(["loop"], settings, workdir / f"loop-{port}.log", f"{base}/healthz"):
        yield base, store_url


@pytest.fixture(scope="module")
def stack(tmp_path_factory, new_database_url) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("loopstack")
    mcp_db_url = new_database_url(workdir, "leave")
    with (
        mcp_server(workdir, mcp_db_url) as mcp,
        model_simulator(
            workdir, profile="instant", retry_after_seconds="1", stall_seconds="5"
        ) as sim,
        loop_service(
            workdir,
            f"{sim}/v1",
            f"{mcp}/mcp",
            new_database_url(workdir, "loop"),
            confirmation_timeout_seconds="1.5",
            model_timeout_seconds="1",
            model_max_retries="1",
            model_retry_backoff_seconds="0.05",
        ) as (loop, store_url),
    ):
        yield Stack(loop, f"{mcp}/mcp", f"{sim}/v1", store_url, mcp_db_url, workdir)


def post_run(stack: Stack, body: dict[str, Any], headers=EMPLOYEE) -> httpx.Response:
    return httpx.post(f"{stack.loop}/v1/runs", json=body, headers=headers, timeout=60)


def stream_run(
    base: str, body: dict[str, Any], headers=EMPLOYEE, answer: str | None = None
) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]]:
    """Run with SSE; answer each confirmation with `answer` (None = leave it unanswered)."""
    events: list[tuple[str, dict[str, Any]]] = []
    run_id = ""
    with (
        httpx.Client(base_url=base, headers=headers, timeout=60) as http,
        http.stream("POST", "/v1/runs", json={**body, "stream": True}) as response,
    ):
        assert response.status_code == 200, response.read()
        for event in sse.events(response.iter_lines()):
            kind, data = event.event, event.json()
            events.append((kind, data))
            if kind == "run.started":
                run_id = data["id"]
            if kind == "confirmation.requested" and answer is not None:
                reply = http.post(
                    f"/v1/runs/{run_id}/confirmations/{data['confirmation_id']}",
                    json={"action": answer},
                )
                assert reply.status_code == 200, reply.text
    final = events[-1][1]
    assert events[-1][0] == "run.finished"
    return events, final


def tool_steps(final: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(s["name"], s["arguments"]) for s in final["steps"] if s["type"] == "tool"]


def leave_status(stack: Stack, leave_id: str) -> str:
    from mcp_server.leaves import LeaveService
    from mcp_server.storage import Database

    database = Database(stack.mcp_db_url)
    try:
        return LeaveService(database).visible_leave("M001", leave_id).status
    finally:
        database.dispose()
