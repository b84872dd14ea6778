"""The one timestamp type both services' tables use, read back in UTC on any database.
(Their schemas change through migrations: common.migrations.)"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import DateTime, Dialect
from sqlalchemy.types import TypeDecorator


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
