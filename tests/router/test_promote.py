"""`python -m ops promote|rollback` against the real vllm-router 0.1.17 and real simulators, all
processes over sockets: a candidate gated by the real release gate, switched in under load with
no request lost, the record written and read back; every refusal in one line, exit 2, with the
router's rotation and the record as they were."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harness.router import vllm_router
from ops.promote import LOCK, RECORD, TARGETS
from tests.support import REPO_ROOT, free_port, model_simulator, run_command, wait_until

THRESHOLDS = Path(__file__).with_name("promote-thresholds.toml")
# The gate on the scenarios that write arguments (create, submit): what tells these candidates
# apart, in a quarter of the whole suite's time.
SCENARIOS = "submit,create"
GATE = (f"--gate-args=--scenarios {SCENARIOS}", "--thresholds", str(THRESHOLDS))
CANDIDATE_ROOT = "/models/leave-copilot-ft-2026-12"

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def replicas(tmp_path_factory) -> Iterator[dict[str, str]]:
    workdir = tmp_path_factory.mktemp("promote")
    with (
        # the serving fine-tune: slow enough (seconds a request) that the clients' requests
        # are still running on it when it leaves rotation, even on a busy machine
        model_simulator(workdir, profile="gpu", itl_ms="200") as serving,
        model_simulator(workdir, profile="instant", model_root=CANDIDATE_ROOT) as candidate,
        model_simulator(workdir, profile="instant", model="leave-copilot-other") as other_name,
        model_simulator(workdir, profile="instant", fault="malformed_arguments") as failing,
    ):
        yield {"serving": serving, "candidate": candidate, "other": other_name, "failing": failing}


@pytest.fixture(scope="module")
def baseline(replicas, tmp_path_factory) -> Path:
    """The serving fine-tune's report, as an earlier `make eval` would have written it (from a
    fast replica of the same policy: the gate judges answers, and this one's are the same)."""
    out = tmp_path_factory.mktemp("baseline")
    with model_simulator(out, profile="instant") as fast:
        status, stdout, stderr = run_command(
            ["evals", "--model-url", f"{fast}/v1", "--scenarios", SCENARIOS, "--out", str(out)],
            {},
            timeout=180,
        )
    assert status == 0, stdout[-2000:] + stderr[-2000:]
    return out / "report.json"


@pytest.fixture
def router(replicas, tmp_path) -> Iterator[str]:
    with vllm_router(tmp_path, [replicas["serving"]]) as (url, _):
        yield url


def ops(*args: str, timeout: float = 240) -> tuple[int, str, str]:
    return run_command(["ops", *args], {}, timeout=timeout)


def workers(router: str) -> list[str]:
    return sorted(httpx.get(f"{router}/list_workers", timeout=5).json()["urls"])


def successes(replica: str) -> float:
    text = httpx.get(f"{replica}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:request_success_total{")
    )


class Load:
    """A few clients asking through the router all the time, each request its own session."""

    def __init__(self, router: str, clients: int = 4) -> None:
        self.router, self.stop = router, threading.Event()
        self.statuses: list[int | str] = []
        self.threads = [threading.Thread(target=self._client) for _ in range(clients)]

    def _client(self) -> None:
        with httpx.Client(timeout=60) as http:
            while not self.stop.is_set():
                try:
                    answer = http.post(
                        f"{self.router}/v1/chat/completions",
                        json={"model": "leave-copilot",
                              "messages": [{"role": "user", "content": "查一下我的假單"}]},
                        headers={"x-session-id": uuid.uuid4().hex},
                    )  # fmt: skip
                    self.statuses.append(answer.status_code)
                except httpx.HTTPError as error:
                    self.statuses.append(type(error).__name__)

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        wait_until(lambda: len(self.statuses) >= 4, timeout=30, what="the load to start")
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)


def test_promote_and_rollback_under_load_lose_no_request(replicas, baseline, router, tmp_path):
    serving, candidate = replicas["serving"], replicas["candidate"]
    state = tmp_path / "state"
    with Load(router) as load:
        status, stdout, stderr = ops(
            "promote", "--router", router, "--state-dir", str(state), "--candidate", candidate,
            "--baseline", str(baseline), *GATE,
        )  # fmt: skip
        assert status == 0, stdout + stderr
        during_promote = len(load.statuses)
        wait_until(lambda: len(load.statuses) > during_promote + 8, timeout=30,
                   what="requests after the promote")  # fmt: skip
    assert set(load.statuses) == {200}, load.statuses
    assert workers(router) == [candidate]

    record = json.loads((state / RECORD).read_text())
    assert record["action"] == "promote"
    assert record["serving"] == [
        {"url": candidate, "model": "leave-copilot", "revision": CANDIDATE_ROOT}
    ]
    assert record["previous"] == [
        {"url": serving, "model": "leave-copilot", "revision": "leave-copilot"}
    ]
    assert (state / record["report"]).is_file() and record["previous_report"] == str(baseline)
    timeline = record["timeline"]
    assert timeline["gate"] < timeline["add"] < timeline["remove"] < timeline["record"]
    drained = timeline["drain"][serving]
    # requests were running on it when it left the rotation, and all of them finished (above)
    assert drained["drained"] and drained["in_flight_at_removal"] > 0, drained
    targets = json.loads((state / TARGETS).read_text())
    assert targets == [
        {"targets": [candidate.removeprefix("http://")],
         "labels": {"model": "leave-copilot", "revision": CANDIDATE_ROOT}}
    ]  # fmt: skip
    replicas_listed = json.loads((state / "replicas.json").read_text())
    assert sorted(g["targets"][0] for g in replicas_listed) == sorted(
        url.removeprefix("http://") for url in (serving, candidate)
    )
    assert "gate exit 0" in stdout and "add: " in stdout and "drain: " in stdout
    assert not (state / LOCK).exists()

    # out of rotation means no new request: the old replica's count stands still
    before = successes(serving)
    for _ in range(6):
        ask = httpx.post(f"{router}/v1/chat/completions", timeout=30,
                         json={"model": "leave-copilot", "messages": [{"role": "user", "content": "hi"}]},
                         headers={"x-session-id": uuid.uuid4().hex})  # fmt: skip
        assert ask.status_code == 200
    assert successes(serving) == before

    with Load(router) as load:
        status, stdout, stderr = ops("rollback", "--router", router, "--state-dir", str(state))
        assert status == 0, stdout + stderr
        after_rollback = len(load.statuses)
        wait_until(lambda: len(load.statuses) > after_rollback + 4, timeout=30,
                   what="requests after the rollback")  # fmt: skip
    assert set(load.statuses) == {200}, load.statuses
    assert workers(router) == [serving]
    back = json.loads((state / RECORD).read_text())
    assert back["action"] == "rollback" and back["serving"] == record["previous"]
    assert back["previous"] == record["serving"] and back["report"] == str(baseline)
    assert json.loads((state / TARGETS).read_text())[0]["labels"]["revision"] == "leave-copilot"

    # a rollback of a rollback would put the candidate back without its gate: refused
    status, _, stderr = ops("rollback", "--router", router, "--state-dir", str(state))
    assert status == 2 and "promote again" in stderr
    assert workers(router) == [serving]


def refused(status: int, stderr: str, *words: str) -> None:
    lines = stderr.strip().splitlines()
    assert status == 2, stderr
    assert len(lines) == 1 and lines[0].startswith("✗ "), stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_a_candidate_that_does_not_answer_is_refused(replicas, baseline, router, tmp_path):
    silent = f"http://127.0.0.1:{free_port()}"
    status, _, stderr = ops(
        "promote", "--router", router, "--state-dir", str(tmp_path), "--candidate", silent,
        "--baseline", str(baseline),
    )  # fmt: skip
    refused(status, stderr, silent, "does not answer")
    assert workers(router) == [replicas["serving"]]
    assert not (tmp_path / RECORD).exists() and not (tmp_path / LOCK).exists()


def test_a_candidate_serving_another_name_is_refused(replicas, baseline, router, tmp_path):
    status, _, stderr = ops(
        "promote", "--router", router, "--state-dir", str(tmp_path),
        "--candidate", replicas["other"], "--baseline", str(baseline),
    )  # fmt: skip
    refused(status, stderr, "'leave-copilot-other'", "not 'leave-copilot'", "the loop asks for")
    assert workers(router) == [replicas["serving"]]
    assert not (tmp_path / RECORD).exists()


def test_a_candidate_the_gate_fails_is_refused_and_a_promote_meanwhile_meets_the_lock(
    replicas, baseline, router, tmp_path
):
    first = subprocess.Popen(
        [sys.executable, "-m", "ops", "promote", "--router", router, "--state-dir", str(tmp_path),
         "--candidate", replicas["failing"], "--baseline", str(baseline), *GATE],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_until(lambda: (tmp_path / LOCK).exists(), timeout=30, what="the first promote's lock")
        status, _, stderr = ops(
            "promote", "--router", router, "--state-dir", str(tmp_path),
            "--candidate", replicas["candidate"], "--baseline", str(baseline),
        )  # fmt: skip
        refused(status, stderr, "another promote or rollback runs", "pid")
        _, stderr = first.communicate(timeout=240)
    finally:
        first.kill()
    refused(first.returncode, stderr, replicas["failing"], "fails the release gate", "report.md")
    report = stderr.strip().rsplit(": ", 1)[1]
    assert "malformed" in Path(report).read_text()
    assert workers(router) == [replicas["serving"]]
    assert not (tmp_path / RECORD).exists() and not (tmp_path / LOCK).exists()


def test_rollback_with_no_record_is_refused(replicas, router, tmp_path):
    status, _, stderr = ops("rollback", "--router", router, "--state-dir", str(tmp_path))
    refused(status, stderr, "no record", str(tmp_path))
    assert workers(router) == [replicas["serving"]]


def test_promote_of_a_replica_already_in_rotation_is_refused(replicas, baseline, router, tmp_path):
    status, _, stderr = ops(
        "promote", "--router", router, "--state-dir", str(tmp_path),
        "--candidate", replicas["serving"], "--baseline", str(baseline),
    )  # fmt: skip
    refused(status, stderr, "already in the router's rotation")
    assert workers(router) == [replicas["serving"]]


def test_a_baseline_that_is_not_there_is_refused(replicas, router, tmp_path):
    status, _, stderr = ops(
        "promote", "--router", router, "--state-dir", str(tmp_path),
        "--candidate", replicas["candidate"], "--baseline", str(tmp_path / "none.json"),
    )  # fmt: skip
    refused(status, stderr, "none.json: no such report")
    assert workers(router) == [replicas["serving"]] and not (tmp_path / RECORD).exists()
