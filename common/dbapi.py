"""Hot statements run straight on the DBAPI cursor, for the few a service makes on every
request: compiled once for the engine's dialect, with the column types' own conversions, and
none of SQLAlchemy's work per execution (on the loop's run writes that work cost about four
times the database's own CPU, measured side by side)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy.engine import Dialect, Engine
from sqlalchemy.engine.interfaces import DBAPICursor
from sqlalchemy.sql.expression import Executable, SelectBase

Row = tuple[Any, ...]


class CompiledStatement:
    """`statement` compiled for `dialect`. An insert or update sets exactly `columns` (all of
    them, every time: nothing is left to column defaults, which only SQLAlchemy's execution
    would fill in)."""

    def __init__(
        self, statement: Executable, dialect: Dialect, columns: Sequence[str] = ()
    ) -> None:
        compiled = statement.compile(dialect=dialect, column_keys=list(columns) or None)  # type: ignore[attr-defined]
        self.sql: str = compiled.string
        self._compiled = compiled
        self._order: Sequence[str] | None = compiled.positiontup  # None: named parameters
        self._to_database: dict[str, Callable[[Any], Any]] = {}
        for name, bind in compiled.binds.items():
            convert = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if convert is not None:
                self._to_database[name] = convert
        self._dialect = dialect
        self._selected = (
            list(statement.selected_columns) if isinstance(statement, SelectBase) else []
        )
        # the columns' conversions; some drivers' depend on the type the database reports
        # (cursor.description), which is the same every time: made at the first fetch
        self._from_database: list[Callable[[Any], Any] | None] | None = None

    def parameters(self, values: Mapping[str, Any]) -> Sequence[Any] | dict[str, Any]:
        """The driver's parameters for `values`, keyed by column (or bind) name. None stays
        SQL NULL, as a value SQLAlchemy leaves out does (its JSON type would store 'null')."""
        bound = self._compiled.construct_params(values)
        for name, convert in self._to_database.items():
            if bound.get(name) is not None:
                bound[name] = convert(bound[name])
        return tuple(bound[name] for name in self._order) if self._order is not None else bound

    def execute(self, cursor: DBAPICursor, values: Mapping[str, Any]) -> int:
        """Run it; the number of rows it changed."""
        cursor.execute(self.sql, self.parameters(values))
        return int(cursor.rowcount)

    def first(self, cursor: DBAPICursor, values: Mapping[str, Any]) -> Row | None:
        """Run a select; its first row, converted as SQLAlchemy's result would be."""
        cursor.execute(self.sql, self.parameters(values))
        row = cursor.fetchone()
        return None if row is None else self._converted(cursor, row)

    def all(self, cursor: DBAPICursor, values: Mapping[str, Any]) -> list[Row]:
        """Run a select; its rows, converted as SQLAlchemy's result would be."""
        cursor.execute(self.sql, self.parameters(values))
        return [self._converted(cursor, row) for row in cursor.fetchall()]

    def _converted(self, cursor: DBAPICursor, row: Sequence[Any]) -> Row:
        if self._from_database is None:
            self._from_database = [
                column.type.dialect_impl(self._dialect).result_processor(
                    self._dialect, described[1]
                )
                for column, described in zip(self._selected, cursor.description, strict=True)
            ]
        return tuple(
            value if convert is None or value is None else convert(value)
            for convert, value in zip(self._from_database, row, strict=True)
        )


@contextmanager
def pooled_cursor(engine: Engine) -> Iterator[DBAPICursor]:
    """A cursor on one of `engine`'s pooled connections, for a read (a single statement is
    one snapshot; the pool rolls back whatever the driver began when the connection returns)."""
    connection = engine.raw_connection()
    try:
        cursor = connection.cursor()
        try:
            yield cursor
        finally:
            cursor.close()
    finally:
        connection.close()


@contextmanager
def transaction(connection: Any, begin: str | None) -> Iterator[DBAPICursor]:
    """A transaction on a DBAPI connection, opened with `begin` where the driver does not open
    one itself; committed when the block ends, rolled back when it raises. Errors are the
    driver's own (see integrity_error)."""
    cursor = connection.cursor()
    try:
        if begin:
            cursor.execute(begin)
        yield cursor
        connection.commit()
    except BaseException:
        connection.rollback()
        raise
    finally:
        cursor.close()


@contextmanager
def pooled_transaction(engine: Engine, begin: str | None) -> Iterator[DBAPICursor]:
    """A transaction (see transaction) on one of `engine`'s pooled connections."""
    connection = engine.raw_connection()
    try:
        with transaction(connection, begin) as cursor:
            yield cursor
    finally:
        connection.close()  # back to the pool


def integrity_error(engine: Engine) -> type[Exception]:
    """The driver's IntegrityError (a unique key taken), which transaction raises."""
    error: type[Exception] = engine.dialect.loaded_dbapi.IntegrityError
    return error
