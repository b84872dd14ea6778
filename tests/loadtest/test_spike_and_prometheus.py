"""The spike shape on a real Locust run against the simulator, and each step's server-side
figures read back from a REAL Prometheus scraping that simulator (skipped without one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from devtools import prometheus
from devtools.localstack import LocalStack
from loadtest.prometheus import FIGURES, add_figures, resolve
from loadtest.results import Slo, summarise
from loadtest.settings import LoadSettings
from loadtest.summary import LoadSummary
from tests.loadtest.records import agent_record
from tests.support import (
    REPO_ROOT,
    free_port,
    model_simulator,
    running,
    serving_in_thread,
    wait_until,
)

PHASE_SECONDS = 4


def load(args: list[str], results: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOAD_")}
    done = subprocess.run(
        [sys.executable, "-m", "loadtest", *args, "--results-dir", str(results)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (path,) = results.glob("*/summary.json")
    summary: dict[str, Any] = json.loads(path.read_text())
    return summary


@pytest.fixture(scope="module")
def spiked(tmp_path_factory) -> Iterator[dict[str, Any]]:
    """One spike run (1 user, 4 for 4 s, 1 again) of model users; Prometheus when installed."""
    workdir: Path = tmp_path_factory.mktemp("spike")
    with ExitStack() as stack:
        sim = stack.enter_context(model_simulator(workdir, profile="gpu"))
        url = "off"
        if prometheus.binary():
            listen = f"127.0.0.1:{free_port()}"
            config = prometheus.local_config({"vllm": sim.removeprefix("http://")}, listen, "1s")
            path = prometheus.write_config(workdir / "prometheus.yml", config)
            command = prometheus.command(path, workdir / "tsdb", listen)
            url = f"http://{listen}"
            log = workdir / "prometheus.log"
            stack.enter_context(running([], {}, log, f"{url}/-/ready", argv=command))
            wait_until(
                lambda: prometheus.query(url, 'up{job="vllm"}') == 1.0,
                timeout=30,
                what="Prometheus scraping the simulator",
            )
        yield load(
            [
                *("--model-url", f"{sim}/v1", "--user-classes", "model", "--max-tokens", "32"),
                *("--shape", "spike", "--users", "1", "--spike-factor", "4"),
                *("--spike-start-seconds", str(PHASE_SECONDS)),
                *("--spike-seconds", str(PHASE_SECONDS)),
                *("--duration-seconds", str(3 * PHASE_SECONDS)),
                *("--prometheus-url", url),
            ],
            workdir / "results",
        )


def test_the_spike_is_its_own_step_between_two_baselines(spiked):
    steps = spiked["steps"]
    assert [(s["phase"], s["users"]) for s in steps] == [
        ("baseline", 1),
        ("spike", 4),
        ("recovery", 1),
    ]
    for step in steps[:2]:
        assert step["seconds"] == pytest.approx(PHASE_SECONDS, abs=0.5)
    assert all(s["errors"] == 0 for s in steps)
    baseline, spike, _ = (s["model"] for s in steps)
    # four users send more than twice what one does, and the spike's percentiles are its own
    assert spike["requests_per_s"] > 2 * baseline["requests_per_s"]
    assert spike["ttft_ms"]["count"] == spike["requests"]


def test_each_step_has_its_window_s_figures_from_prometheus(spiked):
    if spiked["prometheus"]["url"] is None:
        pytest.skip(f"no prometheus binary: {prometheus.INSTALL_HINT}")
    assert "note" not in spiked["prometheus"], spiked["prometheus"]
    assert set(spiked["prometheus"]["queries"]) == set(FIGURES)
    for step in spiked["steps"]:
        figures = step["prometheus"]
        assert figures["notes"] == [], figures
        # model users without think time keep the (simulated) GPU busy all along
        assert figures["gpu_util_percent_mean"] > 50
        assert 0.5 < figures["gpu_busy_mean"] <= 1
        assert 0 < figures["kv_cache_usage_max"] < 1
        # the users resend a handful of conversations with the same tools: the prefix cache
        # serves part of every step's prompts, never more than all of them
        assert 0 < figures["prefix_cache_hit_rate"] <= 1
        # vLLM's own TTFT, from its histogram's buckets: near what the clients measured
        client = step["model"]["ttft_ms"]["p95"]
        assert 0.5 * client < figures["vllm_ttft_p95_ms"] < 2 * client, (figures, client)
    baseline, spike, _ = (s["prometheus"] for s in spiked["steps"])
    # the window is the step's: four users hold more KV cache than one
    assert spike["kv_cache_usage_max"] > baseline["kv_cache_usage_max"]


def test_the_summary_a_real_run_wrote_is_what_its_model_reads_and_writes(spiked):
    """summary.json as `python -m loadtest` wrote it (Prometheus's figures in it where
    installed) reads through loadtest.summary's model and writes back the same JSON, in the
    same order."""
    summary = LoadSummary.model_validate(spiked)
    assert summary.text() == json.dumps(spiked, indent=2, ensure_ascii=False) + "\n"
    assert summary.backend is not None and summary.backend.kind == "simulator"
    assert summary.load is not None and summary.load.shape == "spike"
    assert [step.phase for step in summary.steps] == ["baseline", "spike", "recovery"]


def _summary() -> dict[str, Any]:
    records = [agent_record(float(t), 1000.0) for t in range(4)]
    return summarise(records, [], Slo(200, 50, 5000))


def test_an_unreachable_prometheus_leaves_the_figures_null_with_a_note():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    summary = add_figures(_summary(), url, "")
    (step,) = summary["steps"]
    assert {name: step["prometheus"][name] for name in FIGURES} == dict.fromkeys(FIGURES)
    (note,) = step["prometheus"]["notes"]
    assert note.startswith(f"Prometheus at {url} did not answer")
    assert summary["prometheus"]["url"] == url
    json.dumps(summary)


def test_a_prometheus_not_ready_or_not_yet_resolved_is_waited_for(monkeypatch):
    """In the container tier the load run's one call to Prometheus met the network's name
    server unanswered (EAI_AGAIN) as Locust's workers left, and every figure was lost."""
    import socket

    answers = iter([503, 503, 200])
    end = _summary()["steps"][0]["end"]

    async def query(request):
        status = next(answers, 200)
        if status == 503:
            return PlainTextResponse("Service Unavailable", status_code=503)
        # every figure and the freshness query: one series, scraped after the run
        sample = {"metric": {}, "value": [end, str(end + 1)]}
        return JSONResponse({"status": "success", "data": {"result": [sample]}})

    real = socket.getaddrinfo
    lookups: list[str] = []

    def lookup(host, *args, **kwargs):
        lookups.append(host)
        if host == "prometheus" and len(lookups) <= 2:
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real("127.0.0.1" if host == "prometheus" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    app = Starlette(routes=[Route("/api/v1/query", query)])
    with serving_in_thread(app, "a Prometheus") as served:
        url = "http://prometheus:" + served.rsplit(":", 1)[1]
        summary = add_figures(_summary(), url, "", wait_seconds=20)
    (step,) = summary["steps"]
    assert lookups[:2] == ["prometheus", "prometheus"], lookups
    assert next(answers, None) is None  # both 503s were asked past
    assert "note" not in summary["prometheus"], summary["prometheus"]
    assert step["prometheus"]["notes"] == []
    assert step["prometheus"]["kv_cache_usage_max"] == end + 1


def test_without_a_prometheus_url_the_figures_are_null_and_say_why(tmp_path, monkeypatch):
    monkeypatch.setattr("devtools.localstack.RUN_DIR", tmp_path)  # no make dev running here
    assert resolve("off") == (None, "no Prometheus figures: LOAD_PROMETHEUS_URL=off")
    url, why = resolve("")
    assert url is None and "LOAD_PROMETHEUS_URL is not set" in why
    (step,) = add_figures(_summary(), url, why)["steps"]
    assert step["prometheus"]["notes"] == [why] and step["prometheus"]["gpu_busy_mean"] is None
    assert resolve("http://prometheus:9090") == ("http://prometheus:9090", "")


def test_make_devs_prometheus_is_found_while_it_runs(tmp_path, monkeypatch):
    monkeypatch.setattr("devtools.localstack.RUN_DIR", tmp_path)
    listen = f"127.0.0.1:{free_port()}"
    # a stand-in process with the command line the local stack records for Prometheus
    code = "import sys; print('up', flush=True); sys.stdin.read()"
    command = [sys.executable, "-c", code, f"--web.listen-address={listen}"]
    stand_in = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert stand_in.stdout and stand_in.stdout.readline() == b"up\n"  # past its exec
        pids = LocalStack(tmp_path).pids
        pids.mkdir(parents=True)
        (pids / "prometheus.pid").write_text(f"{stand_in.pid}\n{' '.join(command)}\n")
        assert resolve("") == (f"http://{listen}", "")
    finally:
        stand_in.communicate(b"")
    assert resolve("")[0] is None  # it stopped: no longer found


def test_the_spike_must_leave_a_baseline_after_it():
    with pytest.raises(ValueError, match="not before duration_seconds"):
        LoadSettings(shape="spike", duration_seconds=20, spike_start_seconds=10, spike_seconds=10)
    steps = LoadSettings(shape="spike", users=3, spike_factor=2.5).schedule()
    assert [(s.offset, s.users, s.phase) for s in steps] == [
        (0, 3, "baseline"),
        (10, 8, "spike"),
        (20, 3, "recovery"),
    ]
