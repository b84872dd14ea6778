"""What one `search_leaves` query costs as the company grows, side by side with the filter it
replaced.

An organisation of N employees in teams of ten (the first of each team its manager), 25 leaves
each, in a SQLite file as deployed. Times, per size, the search an employee makes and the one
their manager makes (which sees the team's leaves), with and without a status filter:

- owners first: the MCP server's query (`LeaveService.search`'s statement), which finds the
  actor and their reports among the employees, then reads their leaves by the owner index;
- owner-or-manager across the join: `employee_id = actor OR manager_id = actor` on the joined
  rows, the form before, which no index serves (every leave is read).

Prints the median ms per query of each and their ratio; the sizes rotate so a busy moment of
the machine hits all of them alike.

    python benchmarks/search_scale.py --employees 100 1000 4000
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import String, bindparam, or_, select
from sqlalchemy.sql.expression import Executable

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from common.dbapi import CompiledStatement  # noqa: E402
from mcp_server.leaves import (  # noqa: E402
    MAX_SEARCH_RESULTS,
    SEARCH_COLUMNS,
    _matches,
    _search_statement,
    _search_values,
)
from mcp_server.storage import Database, Employee, Leave  # noqa: E402

LEAVES_PER_EMPLOYEE = 25
TEAM = 10
KEYWORD = ["家庭旅遊"]


def owner_or_manager_statement(words: int, with_status: bool) -> Executable:
    """The search with the filter before: owner or owner's manager, on the joined rows."""
    actor = bindparam("actor_id", type_=String())
    query = (
        select(*SEARCH_COLUMNS)
        .join(Employee, Leave.employee_id == Employee.id)
        .where(or_(Leave.employee_id == actor, Employee.manager_id == actor))
    )
    if with_status:
        query = query.where(Leave.status == bindparam("status", type_=String()))
    for word in range(words):
        query = query.where(_matches(word))
    return query.order_by(Leave.start_date.desc()).limit(MAX_SEARCH_RESULTS)


def company(path: Path, employees: int) -> Database:
    database = Database(f"sqlite:///{path}")
    database.create_schema()
    rng = random.Random(employees)
    first_day = dt.date(2024, 1, 1)
    with database.write() as s:
        for n in range(employees):
            manager = None if n % TEAM == 0 else f"E{n - n % TEAM:05d}"
            s.add(Employee(id=f"E{n:05d}", name=f"員工{n}", manager_id=manager))
        s.flush()
        for n in range(employees):
            for k in range(LEAVES_PER_EMPLOYEE):
                day = first_day + dt.timedelta(days=rng.randrange(900))
                s.add(
                    Leave(
                        id=f"LV-{n:05d}{k:02d}",
                        employee_id=f"E{n:05d}",
                        leave_type="特休",
                        start_date=day,
                        end_date=day,
                        days=1.0,
                        status=rng.choice(["draft", "submitted", "approved", "approved"]),
                        reason=f"家庭旅遊 第{k}次" if k % 3 == 0 else f"看診 第{k}次",
                    )
                )
    return database


def time_query(
    database: Database, statement: CompiledStatement, values: dict[str, Any], repeat: int
) -> tuple[float, int]:
    """Median ms of `repeat` runs of the query, and how many rows it gave."""
    timings = []
    rows: list[Any] = []
    with database.cursor() as cursor:
        for _ in range(repeat):
            started = time.perf_counter()
            rows = statement.all(cursor, values)
            timings.append(time.perf_counter() - started)
    return statistics.median(timings) * 1000, len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--employees", type=int, nargs="+", default=[100, 1000, 4000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20, help="queries per cell and round")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        databases = {n: company(Path(tmp) / f"company-{n}.db", n) for n in args.employees}
        cells = [
            (who, actor, status)
            for who, actor in (("employee", "E00005"), ("manager", "E00000"))
            for status in (None, "approved")
        ]
        shapes = {False: (1, False), True: (1, True)}
        timings: dict[tuple[int, str, str | None, str], list[float]] = {}
        found: dict[tuple[int, str, str | None], int] = {}
        for round_no in range(args.rounds):
            sizes = args.employees[round_no % len(args.employees) :]
            sizes += args.employees[: round_no % len(args.employees)]
            for n in sizes:
                database = databases[n]
                dialect = database.engine.dialect
                for who, actor, status in cells:
                    shape = shapes[status is not None]
                    values = _search_values(actor, KEYWORD, status)
                    for form, statement in (
                        ("owners first", _search_statement(*shape)),
                        ("owner-or-manager", owner_or_manager_statement(*shape)),
                    ):
                        ms, rows = time_query(
                            database, CompiledStatement(statement, dialect), values, args.repeat
                        )
                        timings.setdefault((n, who, status, form), []).append(ms)
                        if found.setdefault((n, who, status), rows) != rows:
                            raise RuntimeError(f"the two forms disagree at {n} employees")
        print(
            f"search_leaves query, median ms over {args.rounds} rounds of {args.repeat} "
            f"(SQLite file; {LEAVES_PER_EMPLOYEE} leaves per employee, teams of {TEAM})"
        )
        print(
            f"  {'employees':>9s} {'leaves':>7s}  {'caller':8s} {'status':8s} {'rows':>4s}"
            f"  {'owners first':>12s}  {'owner-or-manager':>16s}  {'ratio':>6s}"
        )
        for n in args.employees:
            for who, _, status in cells:
                new = statistics.median(timings[(n, who, status, "owners first")])
                old = statistics.median(timings[(n, who, status, "owner-or-manager")])
                print(
                    f"  {n:9d} {n * LEAVES_PER_EMPLOYEE:7d}  {who:8s} {status or 'any':8s}"
                    f" {found[(n, who, status)]:4d}  {new:12.3f}  {old:16.3f}  {old / new:5.1f}x"
                )


if __name__ == "__main__":
    main()
