"""Run latency the SLO can judge: the time a person takes to answer a confirmation question is
counted on its own (leave_loop_confirmation_wait_seconds, the step's and the run's
confirmation_wait_ms), not in the working time the SLO is held to (leave_loop_run_working_
seconds). A loop process of its own (so its histograms hold only this test's runs, and its
confirmation timeout leaves the person time), over real sockets, with the stack's MCP server
and simulator."""

from __future__ import annotations

import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from common.runs_protocol import WaitingConfirmation
from tests.support import wait_until

from .helpers import EMPLOYEE, StreamedRun, loop_service

CANCEL = "取消我表妹婚禮那張假"  # cancel_approved_leave: asks the person first
OTHER_WORK = "我的假期餘額還有多少？"


def histogram(base: str, name: str) -> tuple[float, float]:
    """(count, sum) of a histogram on the service's /metrics."""
    text = httpx.get(f"{base}/metrics", timeout=10).text
    family = next(f for f in text_string_to_metric_families(text) if f.name == name)
    values = {s.name: s.value for s in family.samples if not s.labels.get("le")}
    return values[f"{name}_count"], values[f"{name}_sum"]


def test_a_run_that_waits_for_a_person_counts_the_wait_apart_from_its_working_time(stack, tmp_path):
    with loop_service(tmp_path, stack.model, stack.mcp, confirmation_timeout_seconds="60") as (
        loop,
        _,
    ):
        wait_until(
            lambda: httpx.get(f"{loop}/readyz", timeout=5).status_code == 200,
            timeout=30,
            what="the loop ready",
        )
        asked_at: list[float] = []
        answered_at: list[float] = []
        others: list[int] = []

        def person(run_id: str, question: WaitingConfirmation) -> str:
            """Reads the question, and answers only after seeing other runs of theirs finish
            (half a second of them at least): the run waits on them meanwhile."""
            asked_at.append(time.monotonic())
            while time.monotonic() - asked_at[0] < 0.5:
                done = httpx.post(
                    f"{loop}/v1/runs", json={"input": OTHER_WORK}, headers=EMPLOYEE, timeout=30
                )
                assert done.status_code == 200 and done.json()["status"] == "completed"
                others.append(1)
            answered_at.append(time.monotonic())
            return "decline"

        started = time.monotonic()
        run = StreamedRun(loop, {"input": CANCEL}, EMPLOYEE, person)
        run()
        finished = time.monotonic()
        assert run.error is None and run.final is not None, run.error
        assert run.final.status == "completed" and len(asked_at) == 1

        gap = answered_at[0] - asked_at[0]  # the person's time, as the client saw it
        wall = finished - started  # the run from before it began to after it ended
        wait_count, wait_sum = histogram(loop, "leave_loop_confirmation_wait_seconds")
        working_count, working_sum = histogram(loop, "leave_loop_run_working_seconds")
        wall_count, wall_sum = histogram(loop, "leave_loop_run_duration_seconds")

        runs = 1 + len(others)
        assert wait_count == 1 and working_count == wall_count == runs
        # The loop waited from before the client saw the question to after it answered.
        assert gap <= wait_sum <= wall
        # Wall time holds the wait; working time does not: the waiting run's working time is
        # at most its wall time less the person's time (the other runs never waited).
        assert abs(wall_sum - working_sum - wait_sum) < 1e-3
        assert working_sum <= wall_sum - gap

        # The run's record says the same: the confirming step and the run hold the wait.
        stored = httpx.get(f"{loop}/v1/runs/{run.final.id}", headers=EMPLOYEE, timeout=10).json()
        step = next(s for s in stored["steps"] if s["name"] == "cancel_approved_leave")
        assert gap * 1000 <= step["confirmation_wait_ms"] <= step["duration_ms"]
        assert stored["confirmation_wait_ms"] == step["confirmation_wait_ms"]
        assert run.final.confirmation_wait_ms == stored["confirmation_wait_ms"]
        newest = httpx.get(f"{loop}/v1/runs", headers=EMPLOYEE, timeout=10).json()["runs"][0]
        other = httpx.get(f"{loop}/v1/runs/{newest['id']}", headers=EMPLOYEE, timeout=10).json()
        assert other["input"] == OTHER_WORK and other["confirmation_wait_ms"] == 0
