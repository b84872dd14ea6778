"""The overlays rendered once per session; each test takes a fresh copy to change."""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable
from functools import cache

import pytest

from stack import k8s


@cache
def _rendered(overlay: str) -> tuple[k8s.Obj, ...]:
    return tuple(k8s.render(overlay))


@pytest.fixture(scope="session")
def rendered() -> Callable[[str], list[k8s.Obj]]:
    """rendered(overlay) → a deep copy of that overlay's objects, free to break."""
    if shutil.which("kubectl") is None:
        pytest.skip("no kubectl on PATH (it renders the overlays)")
    return lambda overlay: copy.deepcopy(list(_rendered(overlay)))


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
