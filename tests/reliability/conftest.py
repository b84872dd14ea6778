"""The reliability tier's throwaway PostgreSQL server (skipped, with the reason, where none can
be started: .ci/run installs Debian's `postgresql` package)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.postgres import PostgresServer, throwaway_postgres, unavailable_reason


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with throwaway_postgres() as server:
        yield server
