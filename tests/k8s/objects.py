"""Lookups in rendered Kubernetes objects, shared by the manifest tests."""

from __future__ import annotations

from ops import k8s


def find(objects: list[k8s.Obj], kind: str, name: str) -> k8s.Obj:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def container(obj: k8s.Obj, name: str | None = None) -> k8s.Obj:
    found: k8s.Obj = next(
        c for _, c in k8s.containers(obj, init=False) if name is None or c["name"] == name
    )
    return found


def env(container: k8s.Obj, name: str) -> k8s.Obj:
    found: k8s.Obj = next(e for e in container["env"] if e["name"] == name)
    return found
