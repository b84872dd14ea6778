"""Chaos under load: while concurrent runs go through the stack, each service in turn is killed
with SIGKILL and started again (as a restart policy would), and afterwards every run is held to
what the database says.

The load comes from the load tooling's own client (`loadtest.client.TimedRunClient`: the runs
API's one conversation on the load test's timed streams), with a run id chosen by the client,
so a run whose stream died with the loop is still found afterwards. Every run works on a leave
of its own (a draft to submit, or an approved leave to cancel, the person accepting or
declining), so each write is attributable to one run:

- nothing hangs: every run ends, and no stored run is left "running";
- a true status: a write the database applied is in its run's record as done or as of
  unknown outcome, never missing or refused; a run never records as done a write that the
  database does not have;
- nothing lost or doubled: at most one applied audit entry per leave, declined cancels
  change nothing, and the balance moved by exactly the days of the applied cancels;
- the stack serves again without manual steps: after the last restart a run of each kind
  completes.
"""

from __future__ import annotations

import datetime as dt
import http.client
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from common.contract import StepOutcome, step_failed
from common.run_conversation import RunRefused, StreamEnded, always
from common.runs_protocol import Run, RunFinished
from loadtest.client import StreamingClient, TimedRunClient
from mcp_server.storage import AuditEntry, Balance, Database, Leave
from ops.services import ServiceProcess, free_port, http_ok, seed_database, wait_until

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(600)]

TOKEN = "demo-token-employee"
EMPLOYEE = "E001"
WORKERS = 6
RUNS_PER_KIND = 12  # submit, cancel accepted, cancel declined
WRITES = {"update_leave_status", "cancel_approved_leave"}
REFUSED = {StepOutcome.TOOL_ERROR}  # the server answered no: not applied


@dataclass
class Task:
    kind: str  # submit | cancel-accept | cancel-decline
    leave_id: str
    reason: str
    run_id: str
    events: list[str] = field(default_factory=list)
    final: RunFinished | None = None
    note: str = ""

    @property
    def text(self) -> str:
        if self.kind == "submit":
            return f"把我那張{self.reason}的特休送出審核"
        return f"取消我{self.reason}那張假"

    @property
    def answer(self) -> str:
        return "decline" if self.kind == "cancel-decline" else "accept"


class Service:
    """One service of the stack on a fixed port, so it can be killed and started again."""

    def __init__(self, name: str, module: str, env: dict[str, str], ready: str, logs: Path):
        self.name, self.module, self.env, self.ready, self.logs = name, module, env, ready, logs
        self.starts = 0
        self.process: ServiceProcess | None = None

    def start(self) -> None:
        self.starts += 1
        log = self.logs / f"{self.name}-{self.starts}.log"
        self.process = ServiceProcess([self.module], self.env, log)
        self.process.wait_ready(self.ready, timeout=60)

    def kill(self) -> None:
        assert self.process is not None
        self.process.process.kill()  # SIGKILL: no shutdown handler runs
        self.process.process.wait()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


def seed_tasks(db_url: str, label: str, per_kind: int) -> list[Task]:
    """A draft per submit run and an approved leave per cancel run, all the employee's."""
    database = Database(db_url)
    tasks = []
    with database.write() as s:
        first_day = dt.date(2041, 1, 1) if label == "chaos" else dt.date(2042, 1, 1)
        for kind in ("submit", "cancel-accept", "cancel-decline"):
            for n in range(per_kind):
                start = first_day + dt.timedelta(days=len(tasks))
                leave_id = f"LV-{label[0]}{len(tasks):05x}"
                status = "draft" if kind == "submit" else "approved"
                reason = f"{label}{kind}{n:02d}號"
                s.add(
                    Leave(
                        id=leave_id,
                        employee_id=EMPLOYEE,
                        leave_type="特休",
                        start_date=start,
                        end_date=start,
                        days=1.0,
                        status=status,
                        reason=reason,
                    )
                )
                tasks.append(Task(kind, leave_id, reason, f"{label}-{len(tasks):03d}"))
        balance = s.get(Balance, (EMPLOYEE, "特休"))
        assert balance is not None
        balance.remaining_days += per_kind  # room for every draft to be approved later
    database.dispose()
    return tasks


def balance_of(db_url: str) -> float:
    database = Database(db_url)
    with database.read() as s:
        balance = s.get(Balance, (EMPLOYEE, "特休"))
        assert balance is not None
        days = balance.remaining_days
    database.dispose()
    return days


def applied_writes(db_url: str) -> dict[str, list[tuple[str | None, str | None]]]:
    """Each leave's applied status changes, from the audit log."""
    database = Database(db_url)
    applied: dict[str, list[tuple[str | None, str | None]]] = {}
    with database.read() as s:
        for row in s.scalars(select(AuditEntry).where(AuditEntry.outcome == "applied")):
            applied.setdefault(row.leave_id, []).append((row.from_status, row.to_status))
    database.dispose()
    return applied


def leave_statuses(db_url: str) -> dict[str, str]:
    database = Database(db_url)
    with database.read() as s:
        statuses = {leave.id: leave.status for leave in s.scalars(select(Leave))}
    database.dispose()
    return statuses


class Driver:
    """Runs the tasks from WORKERS threads through the loop while the chaos goes on."""

    def __init__(self, loop_url: str, tasks: list[Task], loop_ready: Callable[[], bool]):
        self.loop_url, self.tasks, self.loop_ready = loop_url, tasks, loop_ready
        self.queue = iter(tasks)
        self.lock = threading.Lock()
        self.errors: list[str] = []

    def next_task(self) -> Task | None:
        with self.lock:
            return next(self.queue, None)

    def work(self) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        stream = StreamingClient(self.loop_url, headers, timeout=60)
        control = StreamingClient(self.loop_url, headers, timeout=30)
        try:
            while (task := self.next_task()) is not None:
                self.run(task, stream, control)
        except Exception as error:  # a harness bug must fail the test, not hide in a thread
            self.errors.append(f"{type(error).__name__}: {error}")
        finally:
            stream.close()
            control.close()

    def run(self, task: Task, stream: StreamingClient, control: StreamingClient) -> None:
        client = TimedRunClient(stream, control)
        for attempt in range(5):
            try:
                task.final = client.run(
                    task.text,
                    answer=always(task.answer),
                    on_event=lambda event, _at: task.events.append(event.event),
                    run_id=task.run_id,
                ).final
                return
            except StreamEnded:
                task.note += f"[stream ended early, attempt {attempt}]"
            except (OSError, RunRefused, http.client.HTTPException) as error:
                # RunRefused: the run, or an answer to its question (ReplyRefused), refused
                task.note += f"[{type(error).__name__}, attempt {attempt}]"
                if isinstance(error, RunRefused) and error.status == 409:
                    # The loop stopped while the run waited for its answer, and the loop that
                    # started next took the run over: it runs, with no stream to give again
                    # ("follow it at /v1/runs/…"). Its client follows it and answers it there.
                    self.follow(task, control)
                    return
            stream.close()
            control.close()
            # The loop is down or restarting: the same run id again either starts the run
            # (it never began) or returns the stored one.
            wait_until(self.loop_ready, timeout=120, what="the loop ready again")

    def follow(self, task: Task, control: StreamingClient) -> None:
        """Read the run until it ends, answering each question it shows once (as the chat
        page does after a lost stream)."""
        answered: set[str] = set()
        path = f"/v1/runs/{task.run_id}"

        def ended() -> bool:
            try:
                status, body = control.request("GET", path)
                if status != 200:
                    return False
                run = Run.model_validate_json(body)
                if run.status != "running":
                    task.final = RunFinished.of(run)
                    return True
                for question in run.confirmations or []:
                    if question.confirmation_id not in answered:
                        answer = {"action": task.answer}
                        control.request(
                            "POST", f"{path}/confirmations/{question.confirmation_id}", answer
                        )
                        answered.add(question.confirmation_id)
            except (OSError, http.client.HTTPException):
                pass  # the loop restarting: read again
            return False

        wait_until(ended, timeout=120, what=f"the run {task.run_id} a restarted loop took over")
        task.note += f"[followed, {len(answered)} answered]"


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict[str, Any]]:
    ports = {name: free_port() for name in ("sim", "mcp", "loop")}
    db_url = f"sqlite:///{tmp_path / 'leave.db'}"
    seed_database(db_url)
    sim = Service(
        "sim",
        "modelsim",
        {
            "SIM_PORT": str(ports["sim"]),
            "SIM_PREFILL_OVERHEAD_MS": "40",
            "SIM_PREFILL_PER_TOKEN_MS": "0",
            "SIM_ITL_MS": "3",
        },
        f"http://127.0.0.1:{ports['sim']}/health",
        tmp_path,
    )
    mcp = Service(
        "mcp",
        "mcp_server",
        {"MCP_DATABASE_URL": db_url, "MCP_PORT": str(ports["mcp"])},
        f"http://127.0.0.1:{ports['mcp']}/readyz",
        tmp_path,
    )
    loop_url = f"http://127.0.0.1:{ports['loop']}"
    loop = Service(
        "loop",
        "loop",
        {
            "LOOP_PORT": str(ports["loop"]),
            "LOOP_MODEL_BASE_URL": f"http://127.0.0.1:{ports['sim']}/v1",
            "LOOP_MCP_URL": f"http://127.0.0.1:{ports['mcp']}/mcp",
            "LOOP_STORE_URL": f"sqlite:///{tmp_path / 'loop.db'}",
            "LOOP_TOOL_TIMEOUT_SECONDS": "5",
            "LOOP_MODEL_TIMEOUT_SECONDS": "5",
        },
        f"{loop_url}/healthz",
        tmp_path,
    )
    services = {"sim": sim, "mcp": mcp, "loop": loop}
    try:
        for service in services.values():
            service.start()
        yield {"services": services, "db_url": db_url, "loop_url": loop_url}
    finally:
        for service in services.values():
            service.stop()


def step_of(final: dict[str, Any], leave_id: str) -> list[dict[str, Any]]:
    return [
        s
        for s in final.get("steps") or []
        if s["type"] == "tool"
        and s["name"] in WRITES
        and (s.get("arguments") or {}).get("leave_id") == leave_id
    ]


def test_every_run_ends_true_while_each_service_is_killed_under_load(stack):
    db_url, loop_url = stack["db_url"], stack["loop_url"]
    services: dict[str, Service] = stack["services"]
    tasks = seed_tasks(db_url, "chaos", RUNS_PER_KIND)
    balance_before = balance_of(db_url)
    # in an order that mixes the kinds, so every kill finds writes of each kind in flight
    order = [t for trio in zip(*(tasks[i::3] for i in range(3)), strict=True) for t in trio]

    def loop_ready() -> bool:
        return http_ok(f"{loop_url}/readyz")

    driver = Driver(loop_url, order, loop_ready)
    threads = [threading.Thread(target=driver.work) for _ in range(WORKERS)]
    started = time.monotonic()
    for thread in threads:
        thread.start()

    kills = []
    for name in ("mcp", "sim", "loop"):
        # kill once runs are going again after the previous restart
        finished_before = sum(t.final is not None for t in tasks)
        wait_until(
            lambda n=finished_before: sum(t.final is not None for t in tasks) >= n + 3,
            timeout=120,
            what=f"runs finishing before the {name} kill",
        )
        services[name].kill()
        kills.append((name, round(time.monotonic() - started, 1)))
        services[name].start()

    for thread in threads:
        thread.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a run hung"
    assert not driver.errors, driver.errors
    chaos_seconds = time.monotonic() - started

    # every run was found again, finished, under the client's own id
    headers = {"Authorization": f"Bearer {TOKEN}"}
    records = {}
    for task in tasks:
        record = httpx.get(f"{loop_url}/v1/runs/{task.run_id}", headers=headers, timeout=10)
        assert record.status_code == 200, (task, record.text)
        records[task.run_id] = record.json()
    statuses = Counter(r["status"] for r in records.values())
    assert "running" not in statuses, statuses
    for record in records.values():
        assert record["status"] == "completed" or record["reason"], record

    audit = applied_writes(db_url)
    leave_status = leave_statuses(db_url)
    doubled = {leave: entries for leave, entries in audit.items() if len(entries) > 1}
    assert not doubled, doubled
    untrue = []
    applied_cancels = 0
    for task in tasks:
        record = records[task.run_id]
        writes = step_of(record, task.leave_id)
        applied = task.leave_id in audit
        if task.kind == "cancel-decline":
            assert not applied and leave_status[task.leave_id] == "approved", (task, record)
        if task.kind.startswith("cancel") and applied:
            applied_cancels += 1
        recorded_done = any(not step_failed(s["error"]) for s in writes)
        recorded_possible = any(s["error"] not in REFUSED for s in writes)
        if applied and not recorded_possible:
            untrue.append(("applied, not in the record", task.kind, record))
        if recorded_done and not applied:
            untrue.append(("recorded as done, not applied", task.kind, record))
    assert not untrue, untrue
    assert balance_of(db_url) == balance_before + applied_cancels

    # the stack serves again: one fresh run of each kind, no manual step
    wait_until(loop_ready, timeout=60, what="the loop ready")
    fresh = seed_tasks(db_url, "after", 1)
    after = Driver(loop_url, fresh, loop_ready)
    after.work()
    assert not after.errors, after.errors
    assert [t.final and t.final.status for t in fresh] == ["completed"] * 3, fresh

    outcomes = Counter(
        (r["status"], (r.get("reason") or "").split(":")[0]) for r in records.values()
    )
    print(
        f"\nchaos: {len(tasks)} runs from {WORKERS} clients in {chaos_seconds:.0f} s; "
        f"kills (service, s): {kills}; outcomes: {dict(outcomes)}; applied writes: "
        f"{len(audit)} (cancels {applied_cancels}); doubled 0, untrue 0; "
        f"client retries: {sum(bool(t.note) for t in tasks)}"
    )
