"""The operator's commands (`python -m mcp_server <command>`): the schema and demo data, the
company's people, tokens. Each ends in one line on a problem (exit status 2), never a
traceback; in the compose stack run them with `docker compose exec mcp-server python -m
mcp_server …`."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import select

from common.entrypoint import CommandError, StartupError

from . import load_test_people, people
from .identity import Identities, InactiveEmployee, UnknownEmployee, parse_duration
from .seed import remove_demo_data, seed
from .settings import ServerSettings
from .storage import AuditEntry, Base, Database

REMOVE_DEMO = "python -m mcp_server remove-demo-data"


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    seed_cmd = commands.add_parser(
        "seed", help="create the schema; in development also the demo employees and tokens"
    )
    seed_cmd.add_argument("--reset", action="store_true", help="drop all data first")
    commands.add_parser(
        "schema", help="the schema's revision and what the next start would apply (no change)"
    )
    importer = commands.add_parser(
        "import", help="create or update the company's people from a CSV export (UTF-8)"
    )
    importer.add_argument("file", type=Path, help="the CSV file; - for standard input")
    importer.add_argument("--dry-run", action="store_true", help="say what would change")
    issue = commands.add_parser(
        "issue-token",
        help="issue a bearer token (printed once): an employee's, or a front end's credential",
    )
    issue.add_argument("employee_id", nargs="?", help="the employee the token lets in")
    issue.add_argument(
        "--front-end",
        metavar="NAME",
        help="instead: a credential for the front end NAME (e.g. open-webui), which acts for "
        "the person each request names by email (docs/identity.md)",
    )
    issue.add_argument("--expires-in", metavar="DURATION", help="e.g. 90d, 12h (default: never)")
    issue.add_argument("--label", default=None, help="what it is for, e.g. a service's name")
    commands.add_parser(
        "list-tokens", help="every token: id, employee or front end, label, dates; no secret"
    )
    revoke = commands.add_parser("revoke-token", help="revoke a token by its id (tok_…)")
    revoke.add_argument("token_id")
    deactivate = commands.add_parser(
        "deactivate", help="an employee who left: tokens and sign-ins stop, history stays"
    )
    deactivate.add_argument("employee_id")
    commands.add_parser("remove-demo-data", help="delete the demo tokens and demo employees")
    add_load = commands.add_parser(
        "add-load-test-employees",
        help="a manager and an employee of a load test's own, with tokens (JSON on stdout)",
    )
    add_load.add_argument(
        "--expires-in", metavar="DURATION", default="12h", help="the tokens' (default 12h)"
    )
    remove_load = commands.add_parser(
        "remove-load-test-employees",
        help="delete load-test employees with their leaves, audit entries and tokens",
    )
    remove_load.add_argument(
        "marker", nargs="?", help="one run's (loadtest-…); without it, every run's leftovers"
    )
    audit = commands.add_parser(
        "audit", help="the audit log, newest last: who acted, through which front end, what"
    )
    audit.add_argument("leave_id", nargs="?", help="only this leave's entries")
    audit.add_argument("--limit", type=int, default=50, help="the newest N entries (default 50)")
    for name, what in (
        ("backup", "copy the leave database to PATH (online; - for standard output)"),
        ("restore", "replace the leave database with a backup (stop it first; - for stdin)"),
    ):
        command = commands.add_parser(name, help=what)
        command.add_argument("path", type=Path)


def run(args: argparse.Namespace, settings: ServerSettings, database: Database) -> int:
    identities = Identities(database, production=settings.is_production)
    command = args.command
    if command == "seed":
        return _seed(settings, database, args.reset)
    if command == "schema":
        from common.migrations import describe

        from .migrations import MIGRATIONS

        print(describe(database.engine, MIGRATIONS))
        return 0
    if command == "import":
        return _import(database, args.file, args.dry_run)
    if command == "issue-token":
        return _issue(identities, args)
    if command == "list-tokens":
        return _list(identities)
    if command == "revoke-token":
        if not identities.revoke(args.token_id):
            raise CommandError(f"revoke-token: no token {args.token_id!r} (see list-tokens)")
        print(f"revoked {args.token_id}: refused from now on by every server on this database")
        return 0
    if command == "deactivate":
        try:
            changed = identities.deactivate(args.employee_id)
        except UnknownEmployee:
            raise CommandError(f"deactivate: no employee {args.employee_id!r}") from None
        said = "deactivated" if changed else "was already inactive:"
        print(f"{args.employee_id} {said} their tokens and sign-ins are refused; history kept")
        return 0
    if command == "audit":
        return _audit(database, args.leave_id, args.limit)
    if command in ("backup", "restore"):
        from common import backup

        # this process's own connections closed first: a restore refuses a database that
        # any other connection holds open
        database.dispose()
        act = backup.backup if command == "backup" else backup.restore
        said = act(settings.database_url, args.path, Base.metadata.tables, "the leave database")
        # with `-` standard output may carry the backup itself
        print(said, file=sys.stderr if args.path == backup.STDIO else sys.stdout)
        return 0
    if command == "add-load-test-employees":
        try:
            expires_in = parse_duration(args.expires_in)
        except ValueError as error:
            raise CommandError(f"add-load-test-employees: --expires-in: {error}") from None
        made = load_test_people.add(database, expires_in)
        print(json.dumps(made.as_json()))
        print(f"added {made.employee_id} and their manager {made.manager_id}", file=sys.stderr)
        return 0
    if command == "remove-load-test-employees":
        try:
            gone = load_test_people.remove(database, args.marker)
        except ValueError as error:
            raise CommandError(f"remove-load-test-employees: {error}") from None
        print(
            f"removed {len(gone.employees)} load-test employee(s)"
            + (f" ({', '.join(gone.employees)})" if gone.employees else "")
            + f" with {gone.leaves} leave(s) and {gone.tokens} token(s)"
        )
        return 0
    if command == "remove-demo-data":
        removed = remove_demo_data(database)
        print(
            f"removed {removed.tokens} demo token(s) and {len(removed.employees)} demo "
            f"employee(s)" + (f" ({', '.join(removed.employees)})" if removed.employees else "")
        )
        for demo_id, reports in sorted(removed.kept.items()):
            one = len(reports) == 1
            shown = ", ".join(reports[:10]) + (
                f" and {len(reports) - 10} more" * (len(reports) > 10)
            )
            print(
                f"kept demo employee {demo_id}: {shown} report{'s' * one} to them; import "
                f"{demo_id} from the HR export (it becomes the company's own) or give "
                f"{'this employee' if one else 'these employees'} another manager, then run "
                "remove-demo-data again"
            )
        return 0
    raise AssertionError(command)


def _seed(settings: ServerSettings, database: Database, reset: bool) -> int:
    if settings.is_production:
        if reset:
            raise CommandError("seed --reset drops every table: refused with MCP_ENV=production")
        print(
            "schema ready (MCP_ENV=production: no demo data; import the company's people with "
            "python -m mcp_server import FILE)"
        )
        return 0
    created = seed(database, reset=reset)
    print("demo data created" if created else "demo data already present; use --reset")
    return 0


def _import(database: Database, path: Path, dry_run: bool) -> int:
    try:
        changes = people.run(database, path, dry_run=dry_run)
    except people.ImportRefused as refused:
        raise CommandError(f"import refused, nothing written:\n{refused}") from None
    for line in people.report(changes, dry_run=dry_run):
        print(line)
    return 0


def _issue(identities: Identities, args: argparse.Namespace) -> int:
    employee_id, front_end, label = args.employee_id, args.front_end, args.label
    if (employee_id is None) == (front_end is None):
        raise CommandError("issue-token: name an employee, or --front-end NAME (not both)")
    try:
        lifetime = parse_duration(args.expires_in) if args.expires_in else None
    except ValueError as error:
        raise CommandError(f"issue-token: --expires-in: {error}") from None
    if front_end is not None:
        try:
            token, public_id = identities.issue_front_end(
                front_end, expires_in=lifetime, label=label
            )
        except ValueError as error:
            raise CommandError(f"issue-token: --front-end: {error}") from None
        return _issued(token, public_id, f"the front end {front_end} (acts for others)", lifetime)
    try:
        token, public_id = identities.issue(employee_id, expires_in=lifetime, label=label)
    except UnknownEmployee:
        raise CommandError(
            f"issue-token: no employee {employee_id!r} in the leave database"
        ) from None
    except InactiveEmployee:
        raise CommandError(f"issue-token: {employee_id} has left (deactivated)") from None
    return _issued(token, public_id, employee_id, lifetime)


def _issued(token: str, public_id: str, whom: str, lifetime: dt.timedelta | None) -> int:
    print(token)  # stdout holds the secret alone, for a script to take
    ends = dt.datetime.now(dt.UTC) + lifetime if lifetime else None
    expiry = f"expires {ends:%Y-%m-%d %H:%M} UTC" if ends else "no expiry"
    print(f"issued {public_id} for {whom} ({expiry}); shown once", file=sys.stderr)
    return 0


def _list(identities: Identities) -> int:
    now = dt.datetime.now(dt.UTC)

    def when(value: dt.datetime | None) -> str:
        return f"{value:%Y-%m-%d %H:%M}" if value else "—"

    rows = [("id", "employee", "state", "label", "created", "expires", "last used")]
    for t in identities.tokens():
        # a front end's credential acts for others: shown by its name, never as an employee
        whom = t.employee_id or f"front-end:{t.front_end}"
        rows.append(
            (t.public_id, whom, t.state(now), t.label or "—", when(t.created_at),
             when(t.expires_at), when(t.last_used_at))
        )  # fmt: skip
    _table(rows)
    return 0


def _table(rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


def _audit(database: Database, leave_id: str | None, limit: int) -> int:
    """The audit log's newest `limit` entries (of one leave), oldest of them first: when,
    which leave, the employee who acted and the front end that acted for them (`—`: their
    own token or sign-in), the tool, the change, the confirmation and the outcome."""
    if limit < 1:
        raise CommandError("audit: --limit must be at least 1")
    query = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit)
    if leave_id is not None:
        query = query.where(AuditEntry.leave_id == leave_id)
    with database.read() as s:
        entries = list(reversed(s.scalars(query).all()))
    rows = [("at", "leave", "actor", "through", "tool", "change", "confirmation", "outcome")]
    for e in entries:
        through = f"{e.front_end} ({e.front_end_token_id})" if e.front_end else "—"
        rows.append(
            (f"{e.at:%Y-%m-%d %H:%M:%S}", e.leave_id, e.actor_id, through, str(e.tool),
             f"{e.from_status or '—'} → {e.to_status or '—'}", e.confirmation or "—", e.outcome)
        )  # fmt: skip
    if not entries:
        print("no audit entries" + (f" for {leave_id}" if leave_id else ""))
        return 0
    _table(rows)
    return 0


def refuse_demo_tokens_in_production(settings: ServerSettings, database: Database) -> None:
    """A production server does not start beside demo tokens: anyone who read the docs has
    them. (They are refused anyway; this makes the leftover visible at once.)"""
    if settings.is_production and Identities(database).demo_tokens():
        raise StartupError(
            f"MCP_DATABASE_URL: MCP_ENV=production but the leave database still holds the "
            f"demo tokens; remove them with `{REMOVE_DEMO}`"
        )
