"""Fixtures more than one test folder uses: fresh databases, and the leave database with the
demo data.

`pytest --database-url postgresql+psycopg://…` runs every test that takes its database from
`new_database_url` on that PostgreSQL server (a new database each) instead of SQLite; the
reliability tier does that with a throwaway server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness import forkserver
from mcp_server.leaves import LeaveService
from mcp_server.seed import seed
from mcp_server.storage import Database
from ops import services
from tests.databases import TestDatabases
from tests.scheduling import long_modules_first

DATABASES_KEY = pytest.StashKey[TestDatabases]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--database-url",
        default=None,
        help="PostgreSQL server (a superuser URL): tests get a fresh database on it, not SQLite",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[DATABASES_KEY] = TestDatabases(config.getoption("--database-url"))
    xdist_controller = bool(getattr(config.option, "numprocesses", None)) and not hasattr(
        config, "workerinput"
    )
    if forkserver.enabled() and not xdist_controller:
        forkserver.start_server()
        services.module_launcher = forkserver.launch


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=long_modules_first)


def pytest_unconfigure(config: pytest.Config) -> None:
    if DATABASES_KEY in config.stash:
        config.stash[DATABASES_KEY].drop_all()


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    databases = config.stash[DATABASES_KEY]
    if databases.backend != "sqlite":
        terminalreporter.write_line(
            f"databases: {len(databases.created)} fresh {databases.backend} databases used"
        )


@pytest.fixture(scope="session")
def new_database_url(pytestconfig: pytest.Config) -> Callable[..., str]:
    """`new_database_url(folder, name="leave")`: the URL of a new, empty database."""
    return pytestconfig.stash[DATABASES_KEY].new


@pytest.fixture
def database(tmp_path: Path, new_database_url: Callable[..., str]) -> Iterator[Database]:
    db = Database(new_database_url(tmp_path))
    seed(db)
    yield db
    db.dispose()


@pytest.fixture
def service(database: Database) -> LeaveService:
    return LeaveService(database)
