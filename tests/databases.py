"""Fresh databases for tests: a SQLite file by default, or a new database on the PostgreSQL
server the run was given with `--database-url` (the same tests then prove PostgreSQL)."""

from __future__ import annotations

import secrets
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url


class TestDatabases:
    __test__ = False  # not a test class, despite its name

    def __init__(self, server_url: str | None) -> None:
        self.server_url = server_url
        self.created: list[str] = []
        self._admin = (
            create_engine(server_url, isolation_level="AUTOCOMMIT") if server_url else None
        )
        if server_url and make_url(server_url).get_backend_name() != "postgresql":
            raise ValueError(f"--database-url must be a PostgreSQL URL, not {server_url!r}")

    @property
    def backend(self) -> str:
        return "postgresql" if self._admin else "sqlite"

    def new(self, folder: Path, name: str = "leave") -> str:
        """The URL of a new, empty database (named after `name` where SQLite needs a file)."""
        if self._admin is None:
            return f"sqlite:///{folder / f'{name}.db'}"
        database = f"test_{name}_{secrets.token_hex(4)}"
        with self._admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{database}"'))
        self.created.append(database)
        assert self.server_url is not None
        return make_url(self.server_url).set(database=database).render_as_string(False)

    def drop_all(self) -> None:
        if self._admin is None:
            return
        with self._admin.connect() as connection:
            for database in self.created:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        self._admin.dispose()
