"""`python -m mcp_server` serves; `python -m mcp_server seed` writes the demo data."""

from __future__ import annotations

import argparse
import logging
import sys

from common.entrypoint import CommandError, exit_on_startup_error, opening


@exit_on_startup_error
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcp_server", description=__doc__)
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("serve", help="serve MCP over Streamable HTTP (the default)")
    seed_cmd = commands.add_parser("seed", help="create the demo employees, leaves and tokens")
    seed_cmd.add_argument("--reset", action="store_true", help="drop all data first")
    token_cmd = commands.add_parser("issue-token", help="issue a bearer token for an employee")
    token_cmd.add_argument("employee_id")
    args = parser.parse_args(argv)

    from common.entrypoint import load_settings, serve

    from .settings import ServerSettings

    settings = load_settings(ServerSettings)
    if settings is None:
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )

    from .storage import Database

    with opening("MCP_DATABASE_URL", "the leave database"):
        database = Database(settings.database_url)
        if args.command != "seed" or not args.reset:
            database.create_schema()
    if args.command == "seed":
        from .seed import seed

        with opening("MCP_DATABASE_URL", "the leave database"):
            created = seed(database, reset=args.reset)
        print("demo data created" if created else "demo data already present; use --reset")
        return 0
    if args.command == "issue-token":
        from .leaves import LeaveService, UnknownEmployee

        try:
            print(LeaveService(database).issue_token(args.employee_id))
        except UnknownEmployee:
            raise CommandError(
                f"issue-token: no employee {args.employee_id!r} in the leave database"
            ) from None
        return 0

    from .app import create_app

    serve(create_app(settings, database), settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
