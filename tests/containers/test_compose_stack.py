"""`make up-sim` in real containers: health, the seed scenarios, a restart mid-run, a replica
dying under load, `make down`.

The stack is started exactly as a user starts it (the Makefile, deploy/compose.yaml +
deploy/compose.sim.yaml + the layout `make up-sim` writes, an env file made from .env.example
asking for two replicas behind the router), through the real Compose v2 binary and podman's
Docker-compatible API.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect

from common.runs_protocol import ConfirmAction
from devtools.demo import run_scenarios
from loadtest.summary import LoadSummary
from loop.api.chat_page import ASSETS
from ops.layout import LAYOUT_FILE
from ops.stackcheck import Stack, problems
from tests.chat_page.chromium import ARTIFACTS, Offline, browser, offline_context
from tests.loop.helpers import StreamedRun, answer_when_shown, stream_until
from tests.support import free_port, wait_until

from .helpers import LOAD_FILE, PROJECT, SITE_OVERRIDE, Engine, env_file, make

PROJECT_LABEL = f"com.docker.compose.project={PROJECT}"

# the module's first test also pays for `make up-sim`
pytestmark = [pytest.mark.containers, pytest.mark.timeout(900)]


class UpStack:
    def __init__(self, engine: Engine, env: Path, loop_port: int, prometheus_port: int) -> None:
        self.engine, self.env, self.loop_port = engine, env, loop_port
        self.prometheus_url = f"http://127.0.0.1:{prometheus_port}"
        extra = (LAYOUT_FILE, Path(__file__).resolve().parents[2] / SITE_OVERRIDE)
        self.stack = Stack(
            sim=True, env_file=env, extra_files=extra, environ=engine.env, engine="podman"
        )
        self.is_up = False

    @property
    def loop_url(self) -> str:
        return f"http://127.0.0.1:{self.loop_port}"

    def compose(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.stack.run(*args, timeout=180)

    def down(self) -> subprocess.CompletedProcess[str]:
        """`make down`, then the volumes too, so the next run starts from fresh demo data."""
        done = make(self.engine, "down", f"ENV_FILE={self.env}", f"COMPOSE_FILES={SITE_OVERRIDE}")
        # with the load profile's file, so its results volume goes too
        self.compose("-f", str(LOAD_FILE), "--profile", "load", "down", "--volumes")
        self.is_up = False
        return done


@pytest.fixture(scope="module")
def stack(engine: Engine, tmp_path_factory, timings) -> Iterator[UpStack]:
    loop_port, prometheus_port = free_port(), free_port()
    env = env_file(
        tmp_path_factory.mktemp("stack"),
        LOOP_PUBLISHED_PORT=str(loop_port),
        MCP_PUBLISHED_PORT=str(free_port()),
        PROMETHEUS_PUBLISHED_PORT=str(prometheus_port),
        GRAFANA_PUBLISHED_PORT=str(free_port()),
        SIM_PROFILE="instant",
        VLLM_GPUS="2",  # two simulator replicas behind the router
    )
    up = UpStack(engine, env, loop_port, prometheus_port)
    started = time.monotonic()
    up.is_up = True
    try:
        done = make(
            engine,
            "up-sim",
            f"ENV_FILE={env}",
            f"COMPOSE_FILES={SITE_OVERRIDE}",
            "SIM_UP_TIMEOUT=180",
        )
        timings["make up-sim"] = time.monotonic() - started
        output = done.stdout[-3000:] + done.stderr[-3000:]
        assert done.returncode == 0, f"make up-sim failed:\n{output}"
        assert "✓ every service is ready" in done.stdout, output
        yield up
    finally:
        if up.is_up:  # a failure before the last test: still leave nothing behind
            up.down()


def test_every_service_is_ready_by_compose_and_by_its_own_endpoints(stack):
    assert problems(stack.stack) == {}
    listed = stack.compose("ps", "--all", "--format", "json").stdout
    containers = map(json.loads, listed.splitlines())
    states = {c["Service"]: (c["State"], c.get("Health", "")) for c in containers}
    assert states["mcp-seed"][0] == "exited"
    for service in ("vllm-0", "vllm-1", "vllm-router", "mcp-server", "loop", "prometheus"):
        assert states[service] == ("running", "healthy"), states
    assert "grafana" not in states  # left out by the tier's override
    ready = httpx.get(f"{stack.loop_url}/readyz", timeout=5).json()
    assert ready["model"] == "ok" and ready["mcp"] == "ok", ready


def test_prometheus_in_the_stack_scrapes_every_service(stack):
    def all_up() -> bool:
        targets = httpx.get(f"{stack.prometheus_url}/api/v1/targets", timeout=5).json()
        health = {
            (t["labels"]["job"], t["labels"].get("replica", "")): t["health"]
            for t in targets["data"]["activeTargets"]
        }
        return health == {
            ("prometheus", ""): "up",
            ("vllm", "vllm-0"): "up",  # each replica found by its name, on its own
            ("vllm", "vllm-1"): "up",
            ("vllm-router", ""): "up",
            ("loop", ""): "up",
            ("mcp-server", ""): "up",
        }

    wait_until(all_up, timeout=60, what="every scrape target up")
    # the simulator's GPU series arrive under the vllm job, marked simulated
    answer = httpx.get(
        f"{stack.prometheus_url}/api/v1/query",
        params={"query": 'DCGM_FI_DEV_FB_USED{simulated="true"}'},
        timeout=5,
    ).json()
    assert answer["data"]["result"], answer


def test_the_seed_scenarios_through_the_published_loop_port(stack, capsys):
    assert run_scenarios(stack.loop_url), "a seed scenario did not go as expected"
    with capsys.disabled():
        print(capsys.readouterr().out)


def test_the_chat_page_is_served_by_the_stack_and_a_demo_employee_uses_it(stack):
    """The page and its files through the loop's published port, then 李小華 (a demo employee:
    the stack is in development) in headless Chromium that reaches only this machine: a
    query, and her approved leave kept when she declines to cancel it."""
    page = httpx.get(f"{stack.loop_url}/", timeout=10)
    assert (
        page.status_code == 200 and "script-src 'self'" in page.headers["content-security-policy"]
    )
    for name in ASSETS:
        assert httpx.get(f"{stack.loop_url}/chat/{name}", timeout=10).status_code == 200, name
    assert httpx.get(f"{stack.loop_url}/chat/config", timeout=10).json()["sign_in"] == "demo"
    shots = ARTIFACTS / "chat-page-compose"
    offline = Offline()
    with browser() as chromium:
        context = offline_context(chromium, offline, width=390, height=844)
        tab = context.new_page()
        tab.goto(f"{stack.loop_url}/")
        tab.get_by_role("button", name="李小華（E002，員工）").click()
        box = tab.get_by_label("你的請求")
        box.fill("查一下我的假單")
        box.press("Enter")
        expect(tab.locator(".bubble.assistant").last).to_contain_text("找到", timeout=60_000)
        expect(tab.get_by_role("button", name="送出")).to_be_enabled(timeout=60_000)
        box.fill("取消我畢業典禮那張假")
        box.press("Enter")
        tab.get_by_role("button", name=re.compile("^不要取消")).click(timeout=60_000)
        expect(tab.locator("section.confirm .result")).to_have_text(
            "你選擇不要：假單維持已核准，沒有任何變更。", timeout=60_000
        )
        shots.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=shots / "demo-employee-declined.png")
        context.close()
    assert offline.blocked == []
    with httpx.Client(base_url=stack.loop_url, headers=OTHER, timeout=60) as http:
        run = http.post("/v1/runs", json={"input": "查一下我畢業典禮的假單"}).json()
    (leave,) = next(s for s in run["steps"] if s["type"] == "tool")["result"]["leaves"]
    assert leave["status"] == "approved", leave


OTHER = {"Authorization": "Bearer demo-token-other"}


class CancelWaitingForAnAnswer:
    """E002 asks, streamed on a thread (StreamedRun), to cancel their approved leave; the run
    waits at its confirmation until `answer()` (or `answer_within` seconds), then accepts it.
    `tolerate_gone`: an answer to a question no loop holds any more is not an error."""

    def __init__(self, loop_url: str, answer_within: float, tolerate_gone: bool = False) -> None:
        self._go = threading.Event()

        def when_told(_run_id: str, _question: object) -> ConfirmAction:
            self._go.wait(answer_within)
            return "accept"

        self.run = StreamedRun(
            loop_url, {"input": "取消我畢業典禮那張假"}, OTHER, when_told,
            timeout=answer_within + 60, tolerate_gone=tolerate_gone,
        ).in_background()  # fmt: skip

    def asked(self, within: float) -> bool:
        return self.run.wait_for("confirmation.requested", within)

    def answer(self) -> None:
        """Let the person answer, and wait for the run to end (up to 180 s)."""
        self._go.set()
        self.run.join(180)

    @property
    def hung(self) -> bool:
        return not self.run.over

    @property
    def events(self) -> list[str]:
        return [event.event for event in self.run.events]


def test_the_stack_recovers_when_the_mcp_server_dies_mid_run(stack, engine):
    """kill -9 of the MCP server while a run waits on a confirmation."""
    # E002's approved leave: the seed scenarios have cancelled E001's already
    # the question may be gone by the time the person answers: the run goes on either way
    cancel = CancelWaitingForAnAnswer(stack.loop_url, answer_within=60, tolerate_gone=True)
    assert cancel.asked(60), f"no confirmation was asked: {cancel.events}"
    container = stack.compose("ps", "-q", "mcp-server").stdout.strip()
    before = restarts(engine, container)
    kill_service_process(engine, container)
    cancel.answer()  # the person answers after the server died
    assert not cancel.hung, "the run hung after the MCP server died"
    finished = cancel.run.final
    assert finished is not None, (cancel.events, cancel.run.error)
    print(f"\nthe run the kill interrupted: {finished.status}, {finished.reason}")
    print(f"  answer: {finished.answer}")
    # the run says its tools were unreachable; it never claims the leave was cancelled
    assert finished.status == "failed", finished
    assert str(finished.reason).startswith(("tools_unavailable", "outcome_unknown")), finished
    assert "已取消" not in (finished.answer or ""), finished

    # restart policy brings the server back; the loop reconnects without manual steps
    wait_until(lambda: restarts(engine, container) > before, timeout=60, what="a restart")
    wait_until(lambda: problems(stack.stack) == {}, timeout=120, what="the stack healthy again")
    with httpx.Client(base_url=stack.loop_url, headers=OTHER, timeout=60) as http:
        run = http.post("/v1/runs", json={"input": "查一下我的假單"}).json()
    assert run["status"] == "completed", run
    searches = [s for s in run["steps"] if s["type"] == "tool"]
    assert [s["name"] for s in searches] == ["search_leaves"]
    # the accepted cancel never reached the database: the leave is still approved
    leaves = {leave["reason"]: leave["status"] for leave in searches[0]["result"]["leaves"]}
    assert leaves["參加弟弟的畢業典禮"] == "approved", leaves


def kill_service_process(engine: Engine, container: str) -> None:
    """kill -9 of the server process itself, as the OOM killer or a crash would end it.

    (`docker kill` counts as a manual stop, after which Docker does not apply the restart
    policy; a process that dies by itself is what the policy is for.)
    """
    init = int(engine.podman.run("inspect", container, "--format", "{{.State.Pid}}").stdout)
    children = Path(f"/proc/{init}/task/{init}/children").read_text().split()
    assert children, "the container's init has no child process"
    os.kill(int(children[0]), signal.SIGKILL)


def restarts(engine: Engine, container: str) -> int:
    return int(engine.podman.run("inspect", container, "--format", "{{.RestartCount}}").stdout)


def query(stack, expression: str) -> dict[str, float]:
    """An instant query on the stack's own Prometheus: {worker or replica: value}."""
    answer = httpx.get(
        f"{stack.prometheus_url}/api/v1/query", params={"query": expression}, timeout=5
    ).json()
    return {
        r["metric"].get("worker") or r["metric"].get("replica", ""): float(r["value"][1])
        for r in answer["data"]["result"]
    }


def test_a_replica_that_dies_under_load_is_taken_out_of_rotation_and_used_again(stack, engine):
    """kill -9 of one simulator replica while six users run sessions through the router."""
    dead = "http://vllm-1:8000"  # as the router names its worker
    headers = {"Authorization": "Bearer demo-token-employee"}
    runs: list[tuple[float, float, str, str, str]] = []  # start, end, status, reason, answer
    stop = threading.Event()

    def user(number: int) -> None:
        with httpx.Client(base_url=stack.loop_url, headers=headers, timeout=120) as http:
            turn = 0
            while not stop.is_set():
                body = {
                    "input": "查一下我的假單",
                    "session_id": f"ses-failover-{number}-{turn % 3}",
                }
                started = time.monotonic()
                run = http.post("/v1/runs", json=body).json()
                runs.append(
                    (started, time.monotonic(), run["status"], run.get("reason") or "",
                     run["answer"])
                )  # fmt: skip
                turn += 1

    def served() -> dict[str, float]:
        return query(stack, "sum by (worker) (vllm_router_processed_requests_total)")

    def in_rotation() -> bool:
        state = query(stack, "max by (worker) (vllm_router_cb_state)")
        health = query(stack, "min by (worker) (vllm_router_worker_health)")
        return state.get(dead) == 0 and health.get(dead) == 1

    users = [threading.Thread(target=user, args=(n,)) for n in range(6)]
    for thread in users:
        thread.start()
    try:
        wait_until(lambda: len(served()) == 2 and min(served().values()) > 0, timeout=60,
                   what="both replicas serving")  # fmt: skip
        container = stack.compose("ps", "-q", "vllm-1").stdout.strip()
        before = restarts(engine, container)
        killed = time.monotonic()
        kill_service_process(engine, container)
        wait_until(lambda: not in_rotation(), timeout=90, what="the router taking vllm-1 out")
        out = time.monotonic()
        wait_until(lambda: restarts(engine, container) > before, timeout=60, what="a restart")
        restarted = time.monotonic()
        count = served().get(dead, 0)
        wait_until(lambda: in_rotation() and served().get(dead, 0) > count, timeout=150,
                   what="vllm-1 back in rotation and served")  # fmt: skip
        used = time.monotonic()
    finally:
        stop.set()
        for thread in users:
            thread.join(150)
    assert not any(thread.is_alive() for thread in users), "a run hung"
    during = [r for r in runs if killed <= r[0] <= restarted]
    by_status: dict[str, int] = {}
    for _, _, status, reason, _ in runs:
        key = status if status == "completed" else f"{status}: {reason.split(':')[0]}"
        by_status[key] = by_status.get(key, 0) + 1
    print(
        f"\nreplica failover: vllm-1 killed at 0 s; out of rotation (seen by Prometheus, 5 s "
        f"scrapes) at {out - killed:.1f} s; container restarted by {restarted - killed:.1f} s; "
        f"back in rotation and served again at {used - killed:.1f} s\n"
        f"  {len(runs)} runs: {by_status}; {len(during)} started while it was down, "
        f"{sum(1 for r in during if r[2] == 'completed')} of them completed; longest run "
        f"{max(r[1] - r[0] for r in runs):.1f} s"
    )
    # every run ended with a true status: served, or failed naming the model, never a claim
    for _, _, status, reason, answer in runs:
        assert status == "completed" or reason.startswith("model_error"), (status, reason)
        if status != "completed":
            assert "找到" not in answer, answer
    # the other replica served while vllm-1 was down
    assert any(r[2] == "completed" for r in during), during


def container_ids(stack: UpStack) -> dict[str, str]:
    """Container name → ID, of every container of the project."""
    listed = stack.engine.podman.run(
        "ps", "-a", "--format", "{{.Names}} {{.ID}}", "--filter", f"label={PROJECT_LABEL}"
    )
    return dict(line.split() for line in listed.stdout.splitlines() if line.strip())


def bundle_image_id(stack: UpStack) -> str:
    image = stack.stack.run("config", "--format", "json").stdout
    name = json.loads(image)["services"]["loop"]["image"]
    return stack.engine.podman.run("image", "inspect", "--format", "{{.Id}}", name).stdout.strip()


def up_sim(stack: UpStack) -> str:
    done = make(
        stack.engine, "up-sim", f"ENV_FILE={stack.env}", f"COMPOSE_FILES={SITE_OVERRIDE}",
        "SIM_UP_TIMEOUT=180",
    )  # fmt: skip
    output = done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0, f"make up-sim failed:\n{output}"
    assert "✓ every service is ready" in done.stdout, output
    return done.stdout + done.stderr


def test_make_up_sim_again_with_nothing_changed_recreates_nothing(stack):
    """Issue 31, 13(a): on podman, Compose took every container for one on the wrong network."""
    containers, image = container_ids(stack), bundle_image_id(stack)
    assert len(containers) >= 7, containers
    said = up_sim(stack)
    assert container_ids(stack) == containers, said[-3000:]
    assert bundle_image_id(stack) == image  # no rebuild either


def test_rotating_the_confirmation_key_recreates_only_the_mcp_server_and_a_pending_confirmation_survives(
    stack,
):
    """docs/operations.md's rotation: MCP_ELICITATION_STATE_KEY=<new>,<old>, then `make up-sim`,
    while a run waits on a confirmation sealed with the old key."""
    # E002's approved leave: the kill test above left it approved
    cancel = CancelWaitingForAnAnswer(stack.loop_url, answer_within=300)
    try:
        assert cancel.asked(60), f"no confirmation was asked: {cancel.events}"
        before = container_ids(stack)
        old = next(
            line.split("=", 1)[1]
            for line in stack.env.read_text().splitlines()
            if line.startswith("MCP_ELICITATION_STATE_KEY=")
        )
        assert "," not in old  # one key before the rotation
        rotate(stack.env, f"MCP_ELICITATION_STATE_KEY=rotated-{free_port()}-{'0' * 48},{old}")
        said = up_sim(stack)
    finally:
        cancel.answer()  # the person answers after the MCP server was recreated
    assert not cancel.hung, "the run hung after the rotation"
    after = container_ids(stack)
    recreated = {name for name in before if after.get(name) != before[name]}
    # the MCP server and its seed job share the environment that holds the key; nothing else
    assert recreated == {f"{PROJECT}-mcp-server-1", f"{PROJECT}-mcp-seed-1"}, said[-3000:]
    # answered once, and the answer taken (ReplyRefused otherwise)
    assert cancel.run.answers == ["accept"] and cancel.run.error is None, cancel.run.error
    finished = cancel.run.final
    assert finished is not None and finished.status == "completed", cancel.events
    with httpx.Client(base_url=stack.loop_url, headers=OTHER, timeout=60) as http:
        run = http.post("/v1/runs", json={"input": "查一下我的假單"}).json()
    searches = [s for s in run["steps"] if s["type"] == "tool"]
    leaves = {leave["reason"]: leave["status"] for leave in searches[0]["result"]["leaves"]}
    assert leaves["參加弟弟的畢業典禮"] == "cancelled", leaves


def test_recreating_the_loop_while_a_run_waits_leaves_the_confirmation_to_answer(stack):
    """Issue 31, item 13: the loop's container recreated (`make up-sim` after a loop setting
    changed) while a run waits on a confirmation; the new loop shows it and goes on."""
    manager = {"Authorization": "Bearer demo-token-manager"}
    body = {"input": "取消我年度健康檢查那張假"}
    started, *_, question = stream_until(stack.loop_url, body, "confirmation.requested", manager)
    run_id = started.id
    before = container_ids(stack)
    rotate(stack.env, "LOOP_REJECTED_TOKEN_CACHE_SECONDS=29")  # the loop's setting alone
    said = up_sim(stack)
    after = container_ids(stack)
    recreated = {name for name in before if after.get(name) != before[name]}
    assert recreated == {f"{PROJECT}-loop-1"}, said[-3000:]
    # the new loop shows the question at once and takes the answer (ReplyRefused otherwise)
    shown, final = answer_when_shown(stack.loop_url, run_id, "accept", manager, within=5)
    assert [q.model_dump() for q in shown] == [question.model_dump()], shown
    assert final.status == "completed", final
    with httpx.Client(base_url=stack.loop_url, headers=manager, timeout=60) as http:
        found = http.post("/v1/runs", json={"input": "查一下年度健康檢查的假單"}).json()
    leaves = next(s for s in found["steps"] if s["type"] == "tool")["result"]["leaves"]
    assert [leave["status"] for leave in leaves] == ["cancelled"], leaves


def rotate(env: Path, setting: str) -> None:
    key = setting.split("=", 1)[0]
    lines = env.read_text().splitlines()
    env.write_text(
        "\n".join(setting if line.startswith(f"{key}=") else line for line in lines) + "\n"
    )


def test_make_load_compose_runs_a_master_and_two_workers_against_the_stack(
    stack, engine, timings, tmp_path
):
    started = time.monotonic()
    done = make(
        engine,
        "load-compose",
        f"ENV_FILE={stack.env}",
        f"COMPOSE_FILES={SITE_OVERRIDE}",
        "SIM=1",  # the stack is make up-sim's
        "LOAD_WORKERS=2",
        f"LOAD_RESULTS={tmp_path}",
        "LOAD_ARGS=--user-classes agent,model --shape constant --users 4 --duration-seconds 15 --think-seconds 0.2",
        timeout=600,
    )
    timings["make load-compose"] = time.monotonic() - started
    output = done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0, f"make load-compose failed:\n{output}"
    (run_dir,) = [path for path in tmp_path.iterdir() if path.is_dir()]
    # every worker's raw log reached the master's folder through the shared volume
    workers = {raw.stem.removeprefix("raw-").rsplit("-", 1)[0] for raw in run_dir.glob("raw-*")}
    assert len(workers) == 2, sorted(p.name for p in run_dir.iterdir())
    step = LoadSummary.read(run_dir / "summary.json").as_json()["steps"][0]
    print(f"\nload-compose: {step['agent']['runs']} runs, {step['model']['requests']} completions")
    assert step["errors"] == 0, step
    assert step["agent"]["runs"] > 0 and step["model"]["requests"] > 0
    assert (run_dir / "locust.html").stat().st_size > 0
    # the stack's own Prometheus, reached on the internal network, gave the step's figures
    assert step["prometheus"]["kv_cache_usage_max"] is not None, step["prometheus"]


CANDIDATE_FILE = "tests/containers/compose.candidate.yaml"
OPS_FILE = Path(__file__).resolve().parents[2] / "deploy" / "compose.ops.yaml"
CANDIDATE_SERVED = 'sum(vllm:request_success_total{job="vllm", replica="vllm-candidate"})'
SERVING_BOARD = Path(__file__).resolve().parents[2] / "monitoring/grafana/dashboards/serving.json"


class RunsUnderLoad:
    """A little load through the published loop: clients starting runs one after another."""

    def __init__(self, loop_url: str, clients: int = 3) -> None:
        self.loop_url, self.stop = loop_url, threading.Event()
        self.outcomes: list[str] = []
        self.threads = [threading.Thread(target=self._client) for _ in range(clients)]

    def _client(self) -> None:
        headers = {"Authorization": "Bearer demo-token-employee"}
        with httpx.Client(base_url=self.loop_url, headers=headers, timeout=120) as http:
            while not self.stop.is_set():
                try:
                    answer = http.post("/v1/runs", json={"input": "查一下我的假單"})
                    ok = answer.status_code == 200
                    self.outcomes.append(answer.json()["status"] if ok else str(answer.status_code))
                except httpx.HTTPError as error:
                    self.outcomes.append(type(error).__name__)

    def __enter__(self) -> RunsUnderLoad:
        for thread in self.threads:
            thread.start()
        wait_until(lambda: len(self.outcomes) >= 3, timeout=60, what="runs under load")
        return self

    def finish(self, more: int) -> None:
        """A few more runs after the switch, then stop and wait for those in flight."""
        target = len(self.outcomes) + more
        wait_until(lambda: len(self.outcomes) >= target, timeout=60, what="runs after it")
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=130)

    def __exit__(self, *_: object) -> None:
        self.stop.set()


def _identity_query() -> str:
    board = json.loads(SERVING_BOARD.read_text())
    (panel,) = [p for p in board["panels"] if p.get("title") == "Which fine-tune serves"]
    return str(panel["targets"][0]["expr"])


def test_make_promote_and_rollback_switch_the_fine_tune_with_no_run_lost(stack, engine, timings):
    query = _identity_query()

    def identity() -> set[tuple[str, str]]:
        answer = httpx.get(f"{stack.prometheus_url}/api/v1/query", params={"query": query},
                           timeout=5).json()  # fmt: skip
        return {(r["metric"]["model"], r["metric"]["revision"]) for r in answer["data"]["result"]}

    old = {("leave-copilot", "simulator:instant")}  # the loop's, before any promote
    wait_until(lambda: identity() == old, timeout=60, what="the dashboard's identity panel")
    candidate = ("-f", CANDIDATE_FILE, "--profile", "candidate")
    started = stack.compose(*candidate, "up", "-d", "--no-deps", "vllm-candidate")
    assert started.returncode == 0, started.stderr[-2000:]
    try:

        def candidate_healthy() -> bool:
            listed = stack.compose(*candidate, "ps", "--format", "json", "vllm-candidate").stdout
            return any(json.loads(line).get("Health") == "healthy" for line in listed.splitlines())

        wait_until(candidate_healthy, timeout=120, what="vllm-candidate healthy")
        files = f"COMPOSE_FILES={SITE_OVERRIDE} {CANDIDATE_FILE}"
        common = (f"ENV_FILE={stack.env}", files, "SIM=1")
        steps = {}
        for action, args in (
            ("promote", ("CANDIDATE=http://vllm-candidate:8000",
                         "PROMOTE_ARGS=--thresholds tests/router/promote-thresholds.toml")),
            ("rollback", ()),
        ):  # fmt: skip
            with RunsUnderLoad(stack.loop_url) as load:
                began = time.monotonic()
                done = make(engine, action, *common, *args, timeout=600)
                timings[f"make {action}"] = time.monotonic() - began
                in_flight_during = len(load.outcomes)
                load.finish(more=6)
            output = done.stdout[-4000:] + done.stderr[-3000:]
            print(f"\nmake {action}:\n" + "\n".join(
                line for line in done.stdout.splitlines() if line[:2].isdigit()
            ))  # fmt: skip
            print(f"runs under load: {len(load.outcomes)} ({in_flight_during} by the end of "
                  f"make {action}): {dict(collections.Counter(load.outcomes))}")  # fmt: skip
            assert done.returncode == 0, f"make {action} failed:\n{output}"
            assert set(load.outcomes) == {"completed"}, load.outcomes
            record = stack.compose("-f", str(OPS_FILE), "--profile", "ops", "run", "--rm",
                                   "--no-deps", "-T", "ops", "cat", "/state/serving.json")  # fmt: skip
            assert record.returncode == 0, record.stderr[-1000:]
            steps[action] = json.loads(record.stdout)
            print(f"record after {action}: {json.dumps(steps[action]['timeline'])}")
            if action == "rollback":  # the candidate was busy when it left: all of it finished
                drained = steps[action]["timeline"]["drain"]["http://vllm-candidate:8000"]
                assert drained["drained"], drained
            expected = (
                {("leave-copilot", "leave-copilot-ft-candidate")} if action == "promote" else old
            )
            wait_until(lambda want=expected: identity() == want, timeout=90,
                       what=f"the identity panel after {action}")  # fmt: skip
            if action == "promote":  # the Serving board sees the candidate's own metrics

                def candidate_served() -> bool:
                    answer = httpx.get(f"{stack.prometheus_url}/api/v1/query",
                                       params={"query": CANDIDATE_SERVED}, timeout=5).json()  # fmt: skip
                    return any(float(r["value"][1]) > 0 for r in answer["data"]["result"])

                wait_until(candidate_served, timeout=90, what="the candidate scraped")
        promoted, rolled_back = steps["promote"], steps["rollback"]
        assert [r["url"] for r in promoted["serving"]] == ["http://vllm-candidate:8000"]
        assert sorted(r["url"] for r in promoted["previous"]) == [
            "http://vllm-0:8000", "http://vllm-1:8000"
        ]  # fmt: skip
        assert {r["revision"] for r in promoted["previous"]} == {"simulator:instant"}
        assert rolled_back["serving"] == promoted["previous"]
    finally:
        stack.compose(*candidate, "rm", "--stop", "--force", "vllm-candidate")


def test_make_down_leaves_nothing_behind(stack, engine, timings):
    # last in this module (pytest keeps file order)
    assert engine.podman.project_resources()["containers"]  # the check below can fail
    started = time.monotonic()
    done = stack.down()
    timings["make down"] = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert engine.podman.project_resources() == {"containers": [], "volumes": [], "networks": []}
