"""The Kubernetes overlays (deploy/k8s/) rendered offline by `kubectl kustomize`, and the
rendered objects read: their pods' specs, labels and containers."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
K8S = REPO_ROOT / "deploy" / "k8s"
OVERLAYS = ("sim", "gpu", "prod")
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")

Obj = dict[str, Any]


class K8sError(RuntimeError):
    pass


def kubectl() -> str:
    found = shutil.which("kubectl")
    if not found:
        raise K8sError("no kubectl on PATH: install it (it carries kustomize) to render deploy/k8s")
    return found


def render_text(overlay: str | Path) -> str:
    folder = overlay if isinstance(overlay, Path) else K8S / "overlays" / overlay
    done = subprocess.run(
        [kubectl(), "kustomize", str(folder)], capture_output=True, text=True, cwd=REPO_ROOT
    )
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
        raise K8sError(f"kubectl kustomize {folder}: {said}")
    return done.stdout


def render(overlay: str | Path) -> list[Obj]:
    """The overlay's objects, as `kubectl kustomize` renders them."""
    return [doc for doc in yaml.safe_load_all(render_text(overlay)) if doc]


def ref(obj: Obj) -> str:
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"


def pod_spec(obj: Obj) -> Obj | None:
    if obj.get("kind") in (*WORKLOADS, "Job"):
        spec: Obj = obj.get("spec", {}).get("template", {}).get("spec", {})
        return spec
    if obj.get("kind") == "Pod":
        pod: Obj = obj.get("spec", {})
        return pod
    return None


def pod_labels(obj: Obj) -> dict[str, str]:
    if obj.get("kind") == "Pod":
        return dict(obj.get("metadata", {}).get("labels", {}))
    return dict(obj.get("spec", {}).get("template", {}).get("metadata", {}).get("labels", {}))


def containers(obj: Obj, *, init: bool = True) -> Iterator[tuple[str, Obj]]:
    """(field path, container) of every container of the object's pods."""
    spec = pod_spec(obj)
    if spec is None:
        return
    kinds = ("initContainers", "containers") if init else ("containers",)
    for kind in kinds:
        for container in spec.get(kind) or []:
            yield f"{kind}[{container.get('name')}]", container


def kinds(objects: list[Obj]) -> Counter[str]:
    return Counter(str(o.get("kind")) for o in objects)
