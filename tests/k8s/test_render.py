"""Every overlay renders offline and passes every check (stack/k8s.py) as it is."""

from __future__ import annotations

import subprocess
import sys

import pytest

from stack import k8s
from tests.support import REPO_ROOT

from .conftest import container, find


@pytest.mark.parametrize("overlay", k8s.OVERLAYS)
def test_overlay_renders_and_passes_every_check(rendered, overlay):
    objects = rendered(overlay)
    problems = k8s.check(objects, k8s.POLICIES[overlay])
    assert problems == []
    print(f"{overlay}: {len(objects)} objects: {dict(sorted(k8s.kinds(objects).items()))}")


def test_each_overlay_carries_what_it_is_for(rendered):
    sim, gpu, prod = (k8s.kinds(rendered(o)) for o in k8s.OVERLAYS)
    # sim: PostgreSQL in the cluster and its own development Secrets, no GPU anything
    assert sim["StatefulSet"] == 1 and sim["Secret"] == 2 and sim["DaemonSet"] == 0
    # gpu and prod: the site's Secrets and database, dcgm-exporter on the GPU nodes
    assert gpu["Secret"] == prod["Secret"] == gpu["StatefulSet"] == 0
    assert gpu["DaemonSet"] == prod["DaemonSet"] == 1
    assert prod["ScaledObject"] == 1 and gpu["ScaledObject"] == 0
    for kinds in (sim, gpu, prod):
        assert kinds["ClusterRole"] == kinds["ClusterRoleBinding"] == 0
        assert kinds["PodDisruptionBudget"] >= 4 and kinds["NetworkPolicy"] >= 12


@pytest.mark.parametrize(
    ("overlay", "mode"), [("sim", "development"), ("gpu", "production"), ("prod", "production")]
)
def test_only_sim_seeds_demo_data(rendered, overlay, mode):
    """The migration Job and the servers read one MCP_ENV: development seeds demo employees
    with published demo tokens, which only the sim overlay's own PostgreSQL may hold."""
    objects = rendered(overlay)
    for name in ("mcp-server", "mcp-migrate"):
        workload = find(objects, "Job" if name == "mcp-migrate" else "Deployment", name)
        for _, serving in k8s.containers(workload):
            if serving.get("envFrom"):
                assert k8s._setting(objects, serving, "MCP_ENV", None) == mode, name


def test_the_drain_holds_on_the_rendered_vllm_pod(rendered):
    """The inequality itself, on the GPU overlay's pod: grace > preStop + --shutdown-timeout."""
    vllm = find(rendered("gpu"), "Deployment", "vllm")
    serving = container(vllm, "vllm")
    pre_stop = int(serving["lifecycle"]["preStop"]["exec"]["command"][1])
    shutdown = int(
        next(a for a in serving["args"] if a.startswith("--shutdown-timeout=")).split("=")[1]
    )
    grace = vllm["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert pre_stop > 0 and shutdown > 0
    assert grace > pre_stop + shutdown, (grace, pre_stop, shutdown)


def test_gpu_pods_ask_for_a_gpu_and_the_shared_model_read_only(rendered):
    vllm = find(rendered("gpu"), "Deployment", "vllm")
    spec = vllm["spec"]["template"]["spec"]
    assert container(vllm)["resources"]["limits"]["nvidia.com/gpu"] == 1
    claim = next(v for v in spec["volumes"] if v["name"] == "models")["persistentVolumeClaim"]
    assert claim == {"claimName": "model-cache", "readOnly": True}
    pvc = find(rendered("gpu"), "PersistentVolumeClaim", "model-cache")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in container(vllm)["env"]


def test_the_command_line_prints_the_counts_and_exits_zero():
    done = subprocess.run(
        [sys.executable, "-m", "stack.k8s"], capture_output=True, text=True, cwd=REPO_ROOT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == list(k8s.OVERLAYS)
    assert all(line.endswith("no problems") for line in lines)


def test_the_command_line_refuses_an_unknown_overlay_in_one_line():
    done = subprocess.run(
        [sys.executable, "-m", "stack.k8s", "staging"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "unknown overlay 'staging': one of sim, gpu, prod"
