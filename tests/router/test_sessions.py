"""Sessions stay where their cache is: the real vllm-router (consistent_hash, as compose runs
it) in front of two simulator replicas, the real loop and MCP server, all over sockets."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.router import vllm_router
from tests.support import loop_service, mcp_server, model_simulator

EMPLOYEE = {"Authorization": "Bearer demo-token-employee"}
SESSIONS = [f"ses-affinity-{n}" for n in range(8)]  # fixed: the hash, and so the spread, is too


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[tuple[str, str, list[str]]]:
    workdir = tmp_path_factory.mktemp("router")
    with (
        mcp_server(workdir) as mcp,
        model_simulator(workdir, profile="instant") as first,
        model_simulator(workdir, profile="instant") as second,
        vllm_router(workdir, [first, second]) as (router, metrics),
        loop_service(workdir, f"{router}/v1", f"{mcp}/mcp") as (loop, _),
    ):
        yield loop, metrics, [first, second]


def served(metrics_url: str) -> dict[str, float]:
    """Requests each replica has served, as the router counts them."""
    text = httpx.get(metrics_url, timeout=5).text
    return {
        sample.labels["worker"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "vllm_router_processed_requests"
        for sample in family.samples
    }


def test_every_turn_of_a_session_lands_on_one_replica_and_sessions_spread(stack):
    loop, metrics, replicas = stack
    where: dict[str, set[str]] = {}
    with httpx.Client(base_url=loop, headers=EMPLOYEE, timeout=60) as http:
        for session in SESSIONS:
            for text in ("查一下我的假單", "查一下我的假單"):  # two runs: several model turns each
                before = served(metrics)
                answer = http.post("/v1/runs", json={"input": text, "session_id": session})
                assert answer.status_code == 200 and answer.json()["status"] == "completed"
                after = served(metrics)
                grew = {w for w, n in after.items() if n > before.get(w, 0)}
                where.setdefault(session, set()).update(grew)
    assert all(len(workers) == 1 for workers in where.values()), where
    assert {w for workers in where.values() for w in workers} == set(replicas), where


def test_a_run_without_a_session_of_its_own_is_routed_too(stack):
    """The facade keeps no session: its run is routed by its run id, and still served."""
    loop, metrics, _ = stack
    before = sum(served(metrics).values())
    answer = httpx.post(
        f"{loop}/v1/chat/completions",
        json={
            "model": "leave-copilot-agent",
            "messages": [{"role": "user", "content": "查一下我的假單"}],
        },
        headers=EMPLOYEE,
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    assert sum(served(metrics).values()) > before
