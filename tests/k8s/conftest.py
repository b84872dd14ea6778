"""The overlays rendered once per session; each test takes a fresh copy to change."""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable
from functools import cache

import pytest

from ops import k8s


@cache
def _rendered(overlay: str) -> tuple[k8s.Obj, ...]:
    return tuple(k8s.render(overlay))


@pytest.fixture(scope="session")
def rendered() -> Callable[[str], list[k8s.Obj]]:
    """rendered(overlay) → a deep copy of that overlay's objects, free to break."""
    if shutil.which("kubectl") is None:
        pytest.skip("no kubectl on PATH (it renders the overlays)")
    return lambda overlay: copy.deepcopy(list(_rendered(overlay)))
