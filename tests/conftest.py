"""Fixtures more than one test folder uses: the leave database with the demo data."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_server.leaves import LeaveService
from mcp_server.seed import seed
from mcp_server.storage import Database


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    db = Database(f"sqlite:///{tmp_path / 'leave.db'}")
    seed(db)
    yield db
    db.dispose()


@pytest.fixture
def service(database: Database) -> LeaveService:
    return LeaveService(database)
