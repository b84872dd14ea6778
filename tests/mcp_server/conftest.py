from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from mcp_server.leaves import LeaveService
from mcp_server.metrics import ServerMetrics
from mcp_server.tools import build_server

from .helpers import connect_to


@pytest.fixture
def metrics() -> ServerMetrics:
    return ServerMetrics()


@pytest.fixture
def server(service: LeaveService, metrics: ServerMetrics):
    return build_server(service, metrics)


@pytest.fixture
def connect(server) -> Callable[..., Any]:
    """`async with connect("E001", Elicitations("decline")) as client:`"""
    return lambda employee_id, elicitations=None: connect_to(server, employee_id, elicitations)
