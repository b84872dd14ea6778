"""Prometheus scrapes the vLLM replicas the layout runs, listed: compose's model with the
layout file written for 1 to 8 GPUs gives Prometheus exactly those replicas as targets, each
labelled replica, in the file the scrape config reads (a stopped one then stays a target that
is down, where DNS discovery dropped it)."""

from __future__ import annotations

import os

import pytest
import yaml

from devtools.prometheus import CONFIG
from ops import compose, layout


def _vllm_job() -> dict:
    config = yaml.safe_load(CONFIG.read_text())
    job: dict = next(j for j in config["scrape_configs"] if j["job_name"] == "vllm")
    return job


def _targets(project: dict) -> tuple[str, list[dict]]:
    """(where the prometheus service mounts the vLLM targets, their file_sd groups)."""
    mounted = next(
        c for c in project["services"]["prometheus"]["configs"]
        if c["source"] == layout.PROMETHEUS_TARGETS
    )  # fmt: skip
    content = project["configs"][layout.PROMETHEUS_TARGETS]["content"]
    return mounted["target"], yaml.safe_load(content)


def test_the_vllm_job_reads_a_list_not_dns():
    job = _vllm_job()
    assert "dns_sd_configs" not in job and "static_configs" not in job
    assert [c["files"] for c in job["file_sd_configs"]] == [
        ["/etc/prometheus-layout/vllm-replicas.yml"],
        ["/etc/prometheus-serving/replicas.json"],  # what make promote put into rotation
    ]


@pytest.mark.parametrize(("gpus", "size"), [(1, 1), (3, 1), (8, 1), (8, 2)])
def test_each_layout_lists_its_replicas_for_prometheus(tmp_path, gpus, size):
    out = tmp_path / "compose.layout.yaml"
    environ = {**os.environ, "VLLM_GPUS": str(gpus), "VLLM_TENSOR_PARALLEL_SIZE": str(size)}
    layout.write_for(compose.EXAMPLE_ENV, sim=True, environ=environ, path=out)
    path, groups = _targets(compose.config(sim=True, environ=environ, extra_files=[out]))
    assert [path] == _vllm_job()["file_sd_configs"][0]["files"]
    assert groups == [
        {"targets": [f"vllm-{k}:8000"], "labels": {"replica": f"vllm-{k}"}}
        for k in range(gpus // size)
    ]


def test_compose_alone_lists_its_one_replica():
    path, groups = _targets(compose.config(sim=False))
    assert path == "/etc/prometheus-layout/vllm-replicas.yml"
    assert groups == [{"targets": ["vllm-0:8000"], "labels": {"replica": "vllm-0"}}]
