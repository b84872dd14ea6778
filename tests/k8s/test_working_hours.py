"""components/keda-working-hours: the floors the cost calculator prices with
`scaling = "scale_down"`, as KEDA would keep them, and the checks that hold a cron trigger
to what KEDA accepts."""

from __future__ import annotations

import os
import textwrap

import pytest

from loadtest.cost.calculate import traffic
from loadtest.cost.settings import CalculatorSettings
from ops import k8s
from ops.k8s import checks

from .objects import find


def site(tmp_path, with_component: bool = True) -> list[k8s.Obj]:
    """A site's overlay over prod, with the working-hours component or without it."""
    prod = os.path.relpath(k8s.K8S / "overlays" / "prod", tmp_path)
    component = os.path.relpath(k8s.K8S / "components" / "keda-working-hours", tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        textwrap.dedent(f"""\
        apiVersion: kustomize.config.k8s.io/v1beta1
        kind: Kustomization
        resources: [{prod}]
        components: [{component if with_component else ""}]
        """)
    )
    return k8s.render(tmp_path)


@pytest.fixture
def working_hours(rendered, tmp_path) -> list[k8s.Obj]:  # rendered: skips without kubectl
    return site(tmp_path)


def cron(objects: list[k8s.Obj]) -> dict[str, str]:
    scaled = find(objects, "ScaledObject", "vllm")
    (trigger,) = [t for t in scaled["spec"]["triggers"] if t["type"] == "cron"]
    return dict(trigger["metadata"])


def test_the_component_passes_every_check(working_hours):
    assert k8s.check(working_hours, k8s.POLICIES["prod"]) == []
    # the queue triggers still scale above the floors
    scaled = find(working_hours, "ScaledObject", "vllm")
    assert [t["type"] for t in scaled["spec"]["triggers"]] == ["prometheus", "prometheus", "cron"]


def test_it_keeps_the_floors_the_calculator_prices_by_default(working_hours):
    """The default office profile's working hours (at or above the day's mean rate), and the
    default min_replicas and off_hours_min_replicas, are the component's cron window and
    floors: the GPU-hours the report prices are the ones KEDA would run."""
    settings = CalculatorSettings(_env_file=None)
    busy = [h for h in range(24) if traffic(settings).busy(h)]
    trigger = cron(working_hours)
    start_minute, start_hour, *every_day = trigger["start"].split()
    end_minute, end_hour, *_ = trigger["end"].split()
    assert (start_minute, end_minute, every_day) == ("0", "0", ["*", "*", "*"])
    assert list(range(int(start_hour), int(end_hour))) == busy
    assert int(trigger["desiredReplicas"]) == settings.min_replicas
    scaled = find(working_hours, "ScaledObject", "vllm")
    assert scaled["spec"]["minReplicaCount"] == settings.off_hours_min_replicas


def test_one_replica_at_night_is_not_left_to_a_drain(rendered, tmp_path):
    """At one replica, maxUnavailable: 1 lets a node drain evict the last one; the component
    makes the budget minAvailable: 1, and the check catches a floor of 1 without it."""
    objects = site(tmp_path)
    budget = find(objects, "PodDisruptionBudget", "vllm")
    assert budget["spec"].get("minAvailable") == 1 and "maxUnavailable" not in budget["spec"]
    budget["spec"] = {"maxUnavailable": 1, "selector": budget["spec"]["selector"]}
    assert checks.check_last_replica(objects) == [
        "PodDisruptionBudget/vllm: spec: lets a drain evict the last ready replica of "
        "Deployment/vllm at 1 replica(s) (ScaledObject/vllm minReplicaCount)"
    ]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            {"timezone": "Asia/Taipai"},
            ".timezone: 'Asia/Taipai' is not an IANA timezone",
        ),
        ({"start": "9 * * *"}, ".start: not a five-field cron expression"),
        ({"end": "0 9 * * *"}, ": start and end are the same time (KEDA refuses it)"),
        (
            {"desiredReplicas": "8"},
            ".desiredReplicas: '8' is not a count from minReplicaCount (1) to maxReplicaCount (4)",
        ),
        (
            {"desiredReplicas": "two"},
            ".desiredReplicas: 'two' is not a count from minReplicaCount (1) to "
            "maxReplicaCount (4)",
        ),
    ],
)
def test_a_cron_trigger_keda_would_refuse_or_misread_fails_the_check(
    working_hours, change, problem
):
    scaled = find(working_hours, "ScaledObject", "vllm")
    trigger = next(t for t in scaled["spec"]["triggers"] if t["type"] == "cron")
    trigger["metadata"].update(change)
    assert checks.check_autoscalers(working_hours) == [
        f"ScaledObject/vllm: spec.triggers[working-hours].metadata{problem}"
    ]


def test_without_the_component_prod_keeps_two_around_the_clock(rendered, tmp_path):
    scaled = find(site(tmp_path, with_component=False), "ScaledObject", "vllm")
    assert scaled["spec"]["minReplicaCount"] == 2
    assert all(t["type"] == "prometheus" for t in scaled["spec"]["triggers"])
