from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import pytest

from tests.support import model_simulator


@pytest.fixture(scope="module")
def sim_url(tmp_path_factory) -> Iterator[str]:
    """One instant-profile simulator shared by a test module."""
    with model_simulator(tmp_path_factory.mktemp("sim"), profile="instant") as base:
        yield base


@pytest.fixture
def start_simulator(tmp_path) -> Callable[..., AbstractContextManager[str]]:
    return lambda **env: model_simulator(tmp_path, **env)
