"""The simulator's dcgm-exporter series: the names and labels of the real exporter, marked simulated."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from modelsim.gpu import BusyClock, SimulatedGpuCollector
from modelsim.settings import SimSettings

from .helpers import SEED_REQUEST


def test_busy_share_and_occupancy_follow_the_running_requests():
    clock = BusyClock(now=0.0)
    clock.update(1, now=1.0)  # idle for 1 s, then one stream for 2 s, then idle 1 s
    clock.update(0, now=3.0)
    busy, sm_active = clock.averages(now=4.0)
    assert busy == 0.5
    assert 0.5 * 0.35 < sm_active < 0.5 * 0.4  # one stream keeps few SMs busy
    clock.update(64, now=4.0)  # a full batch
    assert clock.averages(now=6.0) == (1.0, 1.0)
    assert clock.averages(now=6.0) == (0.0, 0.0)  # nothing elapsed since the last read


def gpu_series(text: str) -> dict[str, tuple[dict[str, str], float]]:
    return {
        f.name: (f.samples[0].labels, f.samples[0].value)
        for f in text_string_to_metric_families(text)
        if f.name.startswith("DCGM_FI_")
    }


async def test_activity_shows_under_load_and_is_labelled_simulated(start_simulator):
    with start_simulator(prefill_overhead_ms="5", itl_ms="5", slowdown_per_running="0") as base:
        async with httpx.AsyncClient(timeout=30) as http:
            idle = gpu_series((await http.get(f"{base}/metrics")).text)
            body = {
                "model": "leave-copilot",
                "messages": [{"role": "user", "content": SEED_REQUEST}],
            }
            await asyncio.gather(
                *(http.post(f"{base}/v1/chat/completions", json=body) for _ in range(4))
            )
            busy = gpu_series((await http.get(f"{base}/metrics")).text)
    for name in (
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_POWER_USAGE",
    ):
        labels, _ = busy[name]
        assert labels["simulated"] == "true" and "simulated" in labels["modelName"]
        assert {"gpu", "UUID", "Hostname"} <= labels.keys()
    assert idle["DCGM_FI_PROF_GR_ENGINE_ACTIVE"][1] == 0.0
    assert busy["DCGM_FI_PROF_GR_ENGINE_ACTIVE"][1] > 0.3  # the requests filled most of the window
    assert busy["DCGM_FI_DEV_POWER_USAGE"][1] > idle["DCGM_FI_DEV_POWER_USAGE"][1]


def test_a_replica_exports_each_gpu_it_stands_for_and_no_other():
    """A tensor-parallel replica on GPUs 2 and 3 (SIM_GPU_IDS=2,3): one series per GPU, with
    dcgm-exporter's labels for that GPU, all as busy as the replica."""
    clock = BusyClock(now=0.0)
    clock.update(1, now=0.0)
    families = {f.name: f for f in SimulatedGpuCollector(clock, ["2", "3"]).collect()}
    samples = families["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].samples
    assert [s.labels["gpu"] for s in samples] == ["2", "3"]
    assert [s.labels["device"] for s in samples] == ["nvidia2", "nvidia3"]
    assert len({s.labels["UUID"] for s in samples}) == 2
    assert samples[0].value == samples[1].value


def test_gpu_ids_must_be_indices(monkeypatch):
    monkeypatch.setenv("SIM_GPU_IDS", "0,x")
    with pytest.raises(ValidationError, match="GPU indices"):
        SimSettings()
    monkeypatch.setenv("SIM_GPU_IDS", "4,5")
    assert SimSettings().gpu_ids == ["4", "5"]
