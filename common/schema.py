"""Tables as the code declares them, on a database an older version made.

`create_all` makes the tables that are missing, never a column a newer version added to a
table that exists. The bundle's schema only ever grows by nullable columns (a value an older
row does not have reads as NULL), so adding the missing ones is the whole migration, and it
is safe to repeat: a column is added only where it is not there yet. Also the one timestamp
type both services' tables use, read back in UTC on any database.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import DateTime, Dialect, MetaData, inspect, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.schema import CreateColumn
from sqlalchemy.types import TypeDecorator


def add_missing_columns(connection: Connection, metadata: MetaData) -> list[str]:
    """ALTER TABLE … ADD COLUMN for each declared column its existing table lacks; returns
    "table.column" for each one added."""
    inspector = inspect(connection)
    added: list[str] = []
    for table in metadata.sorted_tables:
        if not inspector.has_table(table.name):
            continue  # create_all makes it whole
        present = {column["name"] for column in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name in present:
                continue
            if not column.nullable or column.primary_key:
                raise RuntimeError(
                    f"{table.name}.{column.name} is not nullable: it cannot be added to rows "
                    "an older version wrote"
                )
            definition = CreateColumn(column).compile(dialect=connection.dialect)
            connection.execute(text(f"ALTER TABLE {table.name} ADD COLUMN {definition}"))
            added.append(f"{table.name}.{column.name}")
        for index in table.indexes:  # an index of a column just added
            if any(f"{table.name}.{c.name}" in added for c in index.columns):
                index.create(connection, checkfirst=True)
    return added


def upgrade(engine: Engine, metadata: MetaData) -> list[str]:
    """Create the missing tables and add the missing columns, in one transaction."""
    with engine.execution_options(sqlite_begin="IMMEDIATE").begin() as connection:
        metadata.create_all(connection)
        return add_missing_columns(connection, metadata)


class UtcDateTime(TypeDecorator[dt.datetime]):
    """A timestamp that is always read back in UTC with its offset, whatever the database keeps:
    SQLite drops the offset (a naive value, written in UTC), PostgreSQL answers in its session's
    time zone. So every time the API shows ends in +00:00, as step times do."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        return None if value is None else as_utc(value)

    def process_result_value(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        return None if value is None else as_utc(value)


def as_utc(value: dt.datetime) -> dt.datetime:
    """`value` in UTC; a naive one is taken to be UTC already (what this store writes)."""
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)
