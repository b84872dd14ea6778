"""The sim overlay's workloads in real containers, from the rendered YAML (`podman kube play`;
what it plays and what stands in: tests/k8s/podplay.py), then the seed scenarios through them.

Marker k8s_pods (make test-kubernetes): rootful podman, the bundle's image built from
docker/Dockerfile, a PostgreSQL stand-in image (Debian's PostgreSQL; cached between runs).
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devtools.demo import EMPLOYEE, SCENARIOS, run_scenarios
from ops import k8s
from tests.loop.helpers import StreamedRun, answer_when_shown
from tests.support import REPO_ROOT, wait_until

from .podplay import Play, metric_total

pytestmark = [pytest.mark.k8s_pods, pytest.mark.timeout(600)]

HERE = Path(__file__).resolve().parent
HOST_SCRIPT = REPO_ROOT / "tests" / "containers" / "podman-host.sh"
# Started in this order, each once its predecessors are ready: what a cluster does with
# readiness gates and init containers, done in sequence here to spare two cores.
ORDER = [
    ("StatefulSet", "postgres"),
    ("Job", "mcp-migrate"),
    ("Deployment", "vllm"),
    ("Deployment", "mcp-server"),
    ("Deployment", "vllm-router"),
    ("Deployment", "loop"),
]
SESSION_HEADER = "x-session-id"
PLAYED_TAG = "k8s-pods"
# ConfigMap values the tier plays in place of the rendered ones (none at present).
PLAYED_SETTINGS: dict[str, str] = {}


def _podman_env() -> dict[str, str]:
    if os.geteuid() != 0:
        pytest.skip("the pod tier needs root (rootful podman)")
    done = subprocess.run(["bash", str(HOST_SCRIPT)], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        pytest.fail(
            done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "podman-host.sh failed"
        )
    settings = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return {**os.environ, **settings}


def _image(objects: list[k8s.Obj], kind: str, name: str) -> str:
    workload = next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)
    return str(next(c for _, c in k8s.containers(workload, init=False))["image"])


@pytest.fixture(scope="module")
def timings() -> Iterator[dict[str, float]]:
    measured: dict[str, float] = {}
    yield measured
    print("\npod tier timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in measured.items()))


@pytest.fixture(scope="module")
def play(tmp_path_factory, timings) -> Iterator[Play]:
    started = time.monotonic()
    env = _podman_env()

    def podman(
        *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["podman", *args], env=env, capture_output=True, text=True, timeout=timeout
        )
        if check and done.returncode != 0:
            pytest.fail(f"podman {' '.join(args[:2])} failed: {done.stderr.strip()[-600:]}")
        return done

    objects = k8s.render("sim")
    bundle = _image(objects, "Deployment", "mcp-server")
    # The image from this tree, under this tier's own tag (podplay.py says why); built afresh
    # with --no-cache, as the container tier builds, since buildah 1.28 reuses a stale COPY
    # layer (seen: a module added to loop/ missing from the played pods).
    ours = f"localhost/{bundle.split(':')[0]}:{PLAYED_TAG}"
    podman("rmi", "--force", ours, check=False)
    build = subprocess.run(
        ["podman", "build", "-q", "--no-cache", "--format", "docker", "-f", "docker/Dockerfile",
         "-t", ours, "."],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if build.returncode != 0:
        pytest.fail(f"the image build failed: {build.stderr.strip()[-600:]}")
    postgres = _image(objects, "StatefulSet", "postgres")
    if podman("image", "exists", f"docker.io/library/{postgres}", check=False).returncode != 0:
        base = podman(
            "image",
            "list",
            "--format",
            "{{.Repository}}:{{.Tag}}",
            "--filter",
            "reference=*/library/python",
        ).stdout.split()[0]
        podman("build", "-q", "--format", "docker", "--build-arg", f"BASE={base}",
               "-t", f"docker.io/library/{postgres}", str(HERE / "postgres-standin"), timeout=600)  # fmt: skip
    timings["images"] = time.monotonic() - started

    network = f"k8s-pods-{uuid.uuid4().hex[:8]}"
    podman("network", "create", network)
    folder = tmp_path_factory.mktemp("k8s-play")
    played = Play(podman, objects, network, folder, {bundle: ours}, PLAYED_SETTINGS)
    workloads = [played.workload(kind, name) for kind, name in ORDER]
    played.tear_down(workloads)
    started = time.monotonic()
    try:
        for kind, name in ORDER:
            workload = played.workload(kind, name)

            def exited_zero(pod: str) -> None:
                def finished() -> bool:
                    states = played.exited(pod)
                    failed = [
                        n for n, (state, code) in states.items() if state == "exited" and code != 0
                    ]
                    assert not failed, f"{pod} failed:\n{played.logs(pod)}"
                    return bool(states) and all(state == "exited" for state, _ in states.values())

                wait_until(finished, timeout=120, what=f"{pod} to finish")

            pods = played.play(workload, exited_zero)
            if kind == "Job":
                exited_zero(pods[0])
            else:
                for pod in pods:
                    try:
                        wait_until(
                            lambda pod=pod, workload=workload: played.probe_passes(workload, pod),
                            timeout=120,
                            what=f"{pod} Ready",
                        )
                    except TimeoutError:
                        pytest.fail(f"{pod} never became Ready:\n{played.logs(pod)}")
            timings[f"{name} ready"] = time.monotonic() - started
        yield played
    finally:
        started = time.monotonic()
        played.tear_down(workloads)
        podman("network", "rm", "-f", network, check=False)
        podman("rmi", "--force", ours, check=False)
        timings["tear down"] = time.monotonic() - started


def test_every_replica_is_ready_by_its_own_probes(play):
    """Two of each Deployment, each Ready by the manifest's readiness probe (for vLLM, the
    exec probe that /v1/models lists the served model)."""
    for kind, name in ORDER:
        workload = play.workload(kind, name)
        if kind == "Job":
            continue
        pods = play.pod_names(workload)
        assert len(pods) == int(workload["spec"].get("replicas", 1))
        for pod in pods:
            assert play.probe_passes(workload, pod), pod
            assert play.probe_passes(workload, pod, "livenessProbe"), pod


def test_the_app_containers_run_as_the_manifests_say(play):
    for pod, container in (
        ("mcp-server-pod-0", "mcp-server"),
        ("loop-pod-1", "loop"),
        ("vllm-pod-0", "vllm"),
    ):
        said = play.podman("exec", f"{pod}-{container}", "id", "-u").stdout.strip()
        assert said == "10001", (pod, said)
        written = play.podman("exec", f"{pod}-{container}", "touch", "/app/x", check=False)
        assert written.returncode != 0, "the root filesystem must be read-only"


def test_the_seed_scenarios_pass_through_the_pods(play, capsys):
    loop_url = f"http://{play.address('loop-pod-0')}:8080"
    assert run_scenarios(loop_url), "a seed scenario did not go as expected"
    with capsys.disabled():
        print(capsys.readouterr().out)
    # the runs went through the MCP servers to PostgreSQL and the simulators behind the routers
    tool_calls = sum(
        metric_total(
            httpx.get(f"http://{play.address(p)}:8090/metrics").text, "leave_mcp_tool_calls_total"
        )
        for p in ("mcp-server-pod-0", "mcp-server-pod-1")
    )
    served = sum(
        metric_total(
            httpx.get(f"http://{play.address(p)}:8000/metrics").text, "vllm:request_success_total"
        )
        for p in ("vllm-pod-0", "vllm-pod-1")
    )
    assert tool_calls >= 6 and served >= 8, (tool_calls, served)
    # the second loop replica reads the first one's runs: the run store is the shared database
    listing = httpx.get(
        f"http://{play.address('loop-pod-1')}:8080/v1/runs",
        headers={"Authorization": f"Bearer {EMPLOYEE}"}, timeout=10,
    )  # fmt: skip
    assert listing.status_code == 200, listing.text[:300]
    assert len(listing.json()["runs"]) >= len(SCENARIOS), listing.text[:300]


def test_both_routers_send_a_session_to_the_same_replica(play):
    replicas = ("vllm-pod-0", "vllm-pod-1")

    def served() -> list[float]:
        return [
            metric_total(
                httpx.get(f"http://{play.address(p)}:8000/metrics").text,
                "vllm:request_success_total",
            )
            for p in replicas
        ]

    body = {
        "model": "leave-copilot",
        "messages": [{"role": "user", "content": "查一下我的假單"}],
        "max_tokens": 8,
    }
    for session in ("k8s-session-a", "k8s-session-b", "k8s-session-c"):
        before = served()
        for router in (
            "vllm-router-pod-0",
            "vllm-router-pod-1",
            "vllm-router-pod-0",
            "vllm-router-pod-1",
        ):
            answer = httpx.post(
                f"http://{play.address(router)}:8000/v1/chat/completions",
                json=body, headers={SESSION_HEADER: session}, timeout=30,
            )  # fmt: skip
            assert answer.status_code == 200, answer.text[:300]
        moved = [after - was for after, was in zip(served(), before, strict=True)]
        assert sorted(moved) == [0, 4], f"{session}: requests per replica {moved}"


def test_an_answer_sent_to_the_loop_replica_not_holding_the_run_reaches_it(play):
    """No client affinity: the run waits on loop-pod-0, its question is read and answered on
    loop-pod-1, which sends both on to loop-pod-0 (LOOP_PEER_URL=auto: the pod's address)."""
    headers = {"Authorization": "Bearer demo-token-manager"}  # M001's approved leave
    holder = f"http://{play.address('loop-pod-0')}:8080"
    other = f"http://{play.address('loop-pod-1')}:8080"
    waiting = StreamedRun(holder, {"input": "取消我年度健康檢查那張假"}, headers, timeout=90)
    waiting.in_background()
    assert waiting.wait_for("confirmation.requested", 60), waiting.events
    run_id, question = waiting.run_id, waiting.question
    assert question is not None
    shown = httpx.get(f"{other}/v1/runs/{run_id}", headers=headers, timeout=10).json()
    assert [c["confirmation_id"] for c in shown["confirmations"] or []] == [
        question.confirmation_id
    ], shown
    answered = httpx.post(
        f"{other}/v1/runs/{run_id}/confirmations/{question.confirmation_id}",
        json={"action": "decline"}, headers=headers, timeout=30,
    )  # fmt: skip
    assert answered.status_code == 200, answered.text[:300]
    assert waiting.join(60) and waiting.final is not None, waiting.events
    assert waiting.final.status == "completed" and "維持已核准" in (waiting.final.answer or "")


def test_a_loop_replica_stopped_while_its_run_waits_leaves_the_run_to_the_other(play):
    """SIGTERM to a loop pod's container while its run waits on a person's confirmation: the
    container exits at once (its runs ended; the waiting one left running, its stream ended),
    the other replica takes the run over and shows the question, and the answer sent there
    finishes it. Last here: it stops loop-pod-1.

    The container is stopped, not the pod, because that is the kubelet's order: a pod's
    containers get SIGTERM and their grace period, and only then is its sandbox (the network)
    torn down. podman 4.3's `pod stop` takes the network away at once (seen: nothing but `lo`
    0.2 s after SIGTERM), so a drain that needs the MCP server or the store cannot be shown
    through it."""
    headers = {"Authorization": "Bearer demo-token-other"}  # E002's approved leave
    grace = 45  # the manifest's
    url = f"http://{play.address('loop-pod-1')}:8080"
    # the question left open: the stream ends when the pod goes away under it
    waiting = StreamedRun(url, {"input": "取消我畢業典禮那張假"}, headers, timeout=grace + 60)
    waiting.in_background()
    assert waiting.wait_for("confirmation.requested", 60), (
        f"no confirmation was asked: {waiting.events}"
    )
    started = time.monotonic()
    play.podman("stop", "--time", str(grace), "loop-pod-1-loop", timeout=grace + 30)
    stopped_in = time.monotonic() - started
    waiting.join(30)
    run_id, question = waiting.run_id, waiting.question
    assert question is not None and waiting.final is None, waiting.events
    # its runs' 10 s and the open requests' 5 s at most, not the grace period
    assert stopped_in < 15, f"the loop took {stopped_in:.1f} s to stop"
    other = f"http://{play.address('loop-pod-0')}:8080"
    # the other replica takes the run over, shows the question and takes the answer there
    shown, final = answer_when_shown(other, run_id, "accept", headers, within=40)
    assert [q.model_dump() for q in shown] == [question.model_dump()], shown
    taken_over_in = time.monotonic() - started
    print(f"\nloop-pod-1 stopped in {stopped_in:.1f} s; loop-pod-0 took its waiting run over and "
          f"finished it {taken_over_in:.1f} s after the stop: {final.status}")  # fmt: skip
    assert final.status == "completed" and "已取消" in (final.answer or ""), final
