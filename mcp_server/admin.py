"""The operator's commands (`python -m mcp_server <command>`): the schema and demo data, the
company's people, tokens. Each ends in one line on a problem (exit status 2), never a
traceback; in the compose stack run them with `docker compose exec mcp-server python -m
mcp_server …`."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from common.entrypoint import CommandError, StartupError

from . import people
from .identity import Identities, InactiveEmployee, UnknownEmployee, parse_duration
from .seed import remove_demo_data, seed
from .settings import ServerSettings
from .storage import Base, Database

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
    issue = commands.add_parser("issue-token", help="issue a bearer token (printed once)")
    issue.add_argument("employee_id")
    issue.add_argument("--expires-in", metavar="DURATION", help="e.g. 90d, 12h (default: never)")
    issue.add_argument("--label", default=None, help="what it is for, e.g. a service's name")
    commands.add_parser("list-tokens", help="every token: id, employee, label, dates; no secret")
    revoke = commands.add_parser("revoke-token", help="revoke a token by its id (tok_…)")
    revoke.add_argument("token_id")
    deactivate = commands.add_parser(
        "deactivate", help="an employee who left: tokens and sign-ins stop, history stays"
    )
    deactivate.add_argument("employee_id")
    commands.add_parser("remove-demo-data", help="delete the demo tokens and demo employees")
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
        return _issue(identities, args.employee_id, args.expires_in, args.label)
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


def _issue(
    identities: Identities, employee_id: str, expires_in: str | None, label: str | None
) -> int:
    try:
        lifetime = parse_duration(expires_in) if expires_in else None
    except ValueError as error:
        raise CommandError(f"issue-token: --expires-in: {error}") from None
    try:
        token, public_id = identities.issue(employee_id, expires_in=lifetime, label=label)
    except UnknownEmployee:
        raise CommandError(
            f"issue-token: no employee {employee_id!r} in the leave database"
        ) from None
    except InactiveEmployee:
        raise CommandError(f"issue-token: {employee_id} has left (deactivated)") from None
    print(token)  # stdout holds the secret alone, for a script to take
    ends = dt.datetime.now(dt.UTC) + lifetime if lifetime else None
    expiry = f"expires {ends:%Y-%m-%d %H:%M} UTC" if ends else "no expiry"
    print(f"issued {public_id} for {employee_id} ({expiry}); shown once", file=sys.stderr)
    return 0


def _list(identities: Identities) -> int:
    now = dt.datetime.now(dt.UTC)

    def when(value: dt.datetime | None) -> str:
        return f"{value:%Y-%m-%d %H:%M}" if value else "—"

    rows = [("id", "employee", "state", "label", "created", "expires", "last used")]
    for t in identities.tokens():
        rows.append(
            (t.public_id, t.employee_id, t.state(now), t.label or "—", when(t.created_at),
             when(t.expires_at), when(t.last_used_at))
        )  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    return 0


def refuse_demo_tokens_in_production(settings: ServerSettings, database: Database) -> None:
    """A production server does not start beside demo tokens: anyone who read the docs has
    them. (They are refused anyway; this makes the leftover visible at once.)"""
    if settings.is_production and Identities(database).demo_tokens():
        raise StartupError(
            f"MCP_DATABASE_URL: MCP_ENV=production but the leave database still holds the "
            f"demo tokens; remove them with `{REMOVE_DEMO}`"
        )
