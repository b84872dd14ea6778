"""Every overlay renders offline and passes every check (ops/k8s/checks.py) as it is."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ops import k8s
from ops.k8s import checks
from tests.support import REPO_ROOT

from .objects import container, find


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
                assert checks._setting(objects, serving, "MCP_ENV", None) == mode, name


@pytest.mark.parametrize("overlay", k8s.OVERLAYS)
def test_every_pod_is_locked_down(rendered, overlay):
    """Each pod spec of the rendered overlay: seccomp RuntimeDefault, no privilege escalation,
    every capability dropped, a non-root uid (dcgm-exporter alone is root: DCGM needs it), and
    no service-account token but the router's (its pod watcher uses it)."""
    pods = [o for o in rendered(overlay) if k8s.pod_spec(o) is not None]
    assert {k8s.ref(o) for o in pods} >= {"Deployment/vllm", "Deployment/vllm-router"}
    for obj in pods:
        spec, name = k8s.pod_spec(obj), k8s.ref(obj)
        pod = spec.get("securityContext") or {}
        assert pod.get("seccompProfile") == {"type": "RuntimeDefault"}, name
        assert spec.get("automountServiceAccountToken") is (name == "Deployment/vllm-router"), name
        if name != "DaemonSet/dcgm-exporter":
            assert pod.get("runAsNonRoot") is True and pod.get("runAsUser", 0) > 0, name
        for path, serving in k8s.containers(obj):
            context = serving.get("securityContext") or {}
            assert context.get("allowPrivilegeEscalation") is False, (name, path)
            assert "ALL" in context.get("capabilities", {}).get("drop", []), (name, path)


def test_vllm_and_the_fetch_job_share_a_uid_that_owns_the_model_cache(rendered):
    objects = rendered("gpu")
    for kind, name in (("Deployment", "vllm"), ("Job", "model-fetch")):
        pod = k8s.pod_spec(find(objects, kind, name))["securityContext"]
        assert (pod["runAsUser"], pod["runAsGroup"], pod["fsGroup"]) == (1000, 1000, 1000), name
    # HOME (vLLM's, torch's and triton's caches) is writable: an emptyDir, not the image's /root
    vllm = find(objects, "Deployment", "vllm")
    home = next(e["value"] for e in container(vllm)["env"] if e["name"] == "HOME")
    mounts = {m["mountPath"]: m["name"] for m in container(vllm)["volumeMounts"]}
    volumes = {v["name"]: v for v in k8s.pod_spec(vllm)["volumes"]}
    assert "emptyDir" in volumes[mounts[home]]
    assert all(not path.startswith("/root") for path in mounts)


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
        [sys.executable, "-m", "ops.k8s"], capture_output=True, text=True, cwd=REPO_ROOT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == list(k8s.OVERLAYS)
    assert all(line.endswith("no problems") for line in lines)


def test_the_command_line_refuses_an_unknown_overlay_in_one_line():
    done = subprocess.run(
        [sys.executable, "-m", "ops.k8s", "staging"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "unknown overlay 'staging': one of sim, gpu, prod"
