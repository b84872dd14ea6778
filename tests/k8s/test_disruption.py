"""A node drain never takes the last ready replica: for each overlay, and each combination of
an overlay with the KEDA component, every PodDisruptionBudget leaves one replica standing at
the fewest replicas the workload's autoscaler may leave it with."""

from __future__ import annotations

import os
import textwrap

import pytest

from ops import k8s
from ops.k8s import checks


def _with_keda(overlay: str, tmp_path) -> list[k8s.Obj]:
    (tmp_path / "kustomization.yaml").write_text(
        textwrap.dedent(f"""\
        apiVersion: kustomize.config.k8s.io/v1beta1
        kind: Kustomization
        resources: [{os.path.relpath(k8s.K8S / "overlays" / overlay, tmp_path)}]
        components: [{os.path.relpath(k8s.K8S / "components" / "keda", tmp_path)}]
        """)
    )
    return k8s.render(tmp_path)


@pytest.mark.parametrize("combination", ["sim", "gpu", "prod", "sim+keda", "gpu+keda"])
def test_no_budget_lets_a_drain_take_the_last_ready_replica(rendered, tmp_path, combination):
    overlay, _, component = combination.partition("+")
    objects = _with_keda(overlay, tmp_path) if component else rendered(overlay)
    budgets = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    checked = 0
    for workload in (o for o in objects if o["kind"] in ("Deployment", "StatefulSet")):
        fewest, _ = checks._min_replicas(objects, workload)
        for budget in budgets:
            if checks._matches(budget["spec"]["selector"], k8s.pod_labels(workload)):
                # every replica ready; the drain evicts as many as the budget allows
                left = fewest - k8s.disruptions_allowed(budget, fewest, fewest)
                assert left >= 1, (k8s.ref(budget), k8s.ref(workload), fewest)
                checked += 1
    assert checked >= 4  # vllm, vllm-router, mcp-server, loop at least
    assert k8s.check_last_replica(objects) == []


def test_disruptions_allowed_as_the_disruption_controller_counts():
    def budget(**spec):
        return {"spec": spec}

    assert k8s.disruptions_allowed(budget(maxUnavailable=1), 1, 1) == 1  # the old prod
    assert k8s.disruptions_allowed(budget(maxUnavailable=1), 2, 2) == 1
    assert k8s.disruptions_allowed(budget(maxUnavailable=1), 2, 1) == 0  # one already down
    assert k8s.disruptions_allowed(budget(minAvailable=1), 1, 1) == 0
    assert k8s.disruptions_allowed(budget(minAvailable="50%"), 3, 3) == 1  # 2 must stay
    assert k8s.disruptions_allowed(budget(maxUnavailable="50%"), 3, 3) == 2  # rounds up


def test_keda_at_one_replica_with_max_unavailable_one_fails_the_check(rendered):
    objects = rendered("prod")
    scaled = next(o for o in objects if o["kind"] == "ScaledObject")
    scaled["spec"]["minReplicaCount"] = 1
    assert k8s.check_last_replica(objects) == [
        "PodDisruptionBudget/vllm: spec: lets a drain evict the last ready replica of "
        "Deployment/vllm at 1 replica(s) (ScaledObject/vllm minReplicaCount)"
    ]
    # the other way to make them consistent: a budget that keeps one
    budget = next(
        o for o in objects if o["kind"] == "PodDisruptionBudget" and o["metadata"]["name"] == "vllm"
    )
    budget["spec"] = {"minAvailable": 1, "selector": budget["spec"]["selector"]}
    assert k8s.check_last_replica(objects) == []
