"""kube-prometheus-stack finds what the monitoring component ships: its Prometheus selects pod
monitors and rules labelled `release: <Helm release>` (kube-prometheus-stack by default), its
Grafana sidecar dashboards labelled `grafana_dashboard: "1"`; a site's overlay sets its own."""

from __future__ import annotations

import os
import textwrap

import pytest

from devtools import k8s_generated
from ops import k8s

CHART_DEFAULT_RELEASE = {"release": "kube-prometheus-stack"}


@pytest.mark.parametrize("overlay", k8s.OVERLAYS)
def test_every_monitor_and_rule_carries_the_charts_release_label(rendered, overlay):
    objects = rendered(overlay)
    selected = [o for o in objects if o["kind"] in ("PodMonitor", "PrometheusRule")]
    assert {o["kind"] for o in selected} == {"PodMonitor", "PrometheusRule"}
    for obj in selected:
        labels = obj["metadata"].get("labels") or {}
        assert labels.items() >= CHART_DEFAULT_RELEASE.items(), k8s.ref(obj)
    # and only those: no Deployment or Service is told it belongs to the chart's release
    assert all(
        "release" not in (o["metadata"].get("labels") or {})
        for o in objects
        if o["kind"] not in ("PodMonitor", "PrometheusRule")
    )
    dashboards = next(
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("leave-copilot-dashboards")
    )
    assert dashboards["metadata"]["labels"] == k8s_generated.GRAFANA_DASHBOARD_LABEL
    assert k8s_generated.GRAFANA_DASHBOARD_LABEL == {"grafana_dashboard": "1"}


def test_a_site_sets_its_own_release_name(tmp_path):
    """As docs/kubernetes.md says: a `labels` entry of the site's overlay, for those two kinds."""
    (tmp_path / "kustomization.yaml").write_text(
        textwrap.dedent(f"""\
        apiVersion: kustomize.config.k8s.io/v1beta1
        kind: Kustomization
        resources: [{os.path.relpath(k8s.K8S / "overlays" / "prod", tmp_path)}]
        labels:
          - pairs: {{release: monitoring}}
            fields:
              - {{kind: PodMonitor, path: metadata/labels, create: true}}
              - {{kind: PrometheusRule, path: metadata/labels, create: true}}
        """)
    )
    objects = k8s.render(tmp_path)
    releases = {
        o["metadata"]["labels"]["release"]
        for o in objects
        if o["kind"] in ("PodMonitor", "PrometheusRule")
    }
    assert releases == {"monitoring"}
