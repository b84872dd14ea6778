"""The schemas the shipped versions made, to upgrade in tests.

tests/fixtures/schemas/ holds one snapshot per distinct schema a version on main made: its
tables as the models of the commit that first shipped it declared them (column names, types,
nullability, keys, indexes), read from that commit. Every commit on main has shipped, and the
commits in between made the same tables as the one before them, so these are every schema a
database may have been left in (besides a later version's add_missing_columns having added some
of the next columns to an older one, which the migrations' steps skip when present).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy.types
from sqlalchemy import Column, ForeignKey, Index, MetaData, Table, insert
from sqlalchemy.engine import Engine

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "schemas"


@dataclass(frozen=True)
class ShippedSchema:
    name: str  # its file's stem: <database>-<n>-<commit>
    commit: str
    tables: dict[str, Any]

    def metadata(self) -> MetaData:
        metadata = MetaData()
        for table_name, table in self.tables.items():
            columns = [
                Column(
                    column["name"],
                    # a type's repr, e.g. String(length=64), evaluated with SQLAlchemy's types
                    eval(column["type"], vars(sqlalchemy.types)),
                    *(ForeignKey(target) for target in column.get("foreign_key") or ()),
                    nullable=column["nullable"],
                    primary_key=column["primary_key"],
                )
                for column in table["columns"]
            ]
            made = Table(table_name, metadata, *columns)
            for index in table["indexes"]:
                Index(index["name"], *(made.c[c] for c in index["columns"]), unique=index["unique"])
        return metadata

    def create(self, engine: Engine, rows: dict[str, list[dict[str, Any]]]) -> None:
        """Make this schema on an empty database, with `rows` (each given only the columns its
        table had then)."""
        metadata = self.metadata()
        with engine.begin() as connection:
            metadata.create_all(connection)
            for table in metadata.sorted_tables:
                for row in rows.get(table.name, []):
                    present = {k: v for k, v in row.items() if k in table.c}
                    connection.execute(insert(table).values(present))

    def has_column(self, table: str, column: str) -> bool:
        return any(c["name"] == column for c in self.tables.get(table, {}).get("columns", []))


def shipped(database: str) -> list[ShippedSchema]:
    """Every schema `database` ("loop", "leave") has shipped with, oldest first."""
    found = []
    for path in sorted(
        FIXTURES.glob(f"{database}-*.json"), key=lambda p: int(p.stem.split("-")[1])
    ):
        document = json.loads(path.read_text(encoding="utf-8"))
        found.append(ShippedSchema(path.stem, document["commit"], document["tables"]))
    return found
