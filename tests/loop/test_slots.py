"""LOOP_MAX_CONCURRENT_RUNS counts runs at work: a run waiting for a person's answer gives its
slot up, so open questions never keep everyone else's runs waiting. Real processes: the MCP
server, the simulator and the loop with a single slot."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support import loop_service, mcp_server, model_simulator, wait_until

from .helpers import EMPLOYEE, MANAGER, stream_until


def in_flight(http: httpx.Client) -> float:
    families = text_string_to_metric_families(http.get("/metrics").text)
    family = next(f for f in families if f.name == "leave_loop_runs_in_flight")
    return family.samples[0].value


def test_a_question_waiting_on_a_person_leaves_the_only_slot_to_other_runs(tmp_path):
    with (
        mcp_server(tmp_path) as mcp,
        model_simulator(tmp_path, profile="instant") as sim,
        loop_service(
            tmp_path,
            f"{sim}/v1",
            f"{mcp}/mcp",
            max_concurrent_runs="1",
            confirmation_timeout_seconds="120",  # the person takes their time
        ) as (loop, _),
        httpx.Client(base_url=loop, headers=EMPLOYEE, timeout=30) as http,
    ):
        # the employee's run asks before cancelling an approved leave, and waits
        events = stream_until(loop, {"input": "取消我表妹婚禮那張假"}, "confirmation.requested")
        run_id, question = events[0].id, events[-1]
        assert http.get(f"/v1/runs/{run_id}").json()["status"] == "running"
        assert in_flight(http) == 0

        # meanwhile others' runs go through the one slot, each within the client's 30 s
        for headers in (MANAGER, EMPLOYEE):
            other = http.post("/v1/runs", json={"input": "查一下我的特休餘額"}, headers=headers)
            assert other.status_code == 200 and other.json()["status"] == "completed", other.text

        # answered, the waiting run takes the slot back and finishes
        path = f"/v1/runs/{run_id}/confirmations/{question.confirmation_id}"
        assert http.post(path, json={"action": "decline"}).status_code == 200
        seen: list[dict] = []

        def finished() -> bool:
            seen.append(http.get(f"/v1/runs/{run_id}").json())
            return seen[-1]["status"] != "running"

        wait_until(finished, timeout=30, what="the answered run to finish")
        assert seen[-1]["status"] == "completed" and "維持已核准" in seen[-1]["answer"]
        # every slot given back: none counted as at work, and the next run still gets one
        assert in_flight(http) == 0
        last = http.post("/v1/runs", json={"input": "查一下我的特休餘額"})
        assert last.json()["status"] == "completed"
