"""The Kubernetes overlays (deploy/k8s/) rendered offline and checked as a cluster would need
them: render (kubectl kustomize, and reading the rendered objects), schemas (core kinds and
custom resources against their schemas), checks (every rule an overlay must satisfy, one line
per problem). `python -m ops.k8s [OVERLAY …]` prints each overlay's object counts and problems
(make kubernetes-render). What the tests and the command use is here by name."""

from __future__ import annotations

from .checks import (
    POLICIES,
    Policy,
    check,
    check_egress,
    check_last_replica,
    disruptions_allowed,
)
from .render import (
    K8S,
    OVERLAYS,
    K8sError,
    Obj,
    containers,
    kinds,
    pod_labels,
    pod_spec,
    ref,
    render,
    render_text,
)

__all__ = [
    "K8S",
    "OVERLAYS",
    "POLICIES",
    "K8sError",
    "Obj",
    "Policy",
    "check",
    "check_egress",
    "check_last_replica",
    "containers",
    "disruptions_allowed",
    "kinds",
    "pod_labels",
    "pod_spec",
    "ref",
    "render",
    "render_text",
]
