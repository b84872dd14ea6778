"""`python -m mcp_server` serves; its other commands manage the schema, the company's
people and tokens (`python -m mcp_server --help`, mcp_server/admin.py)."""

from __future__ import annotations

import argparse
import logging
import sys

from common.entrypoint import commanding, exit_on_startup_error, opening


@exit_on_startup_error
def main(argv: list[str] | None = None) -> int:
    from .admin import add_commands

    parser = argparse.ArgumentParser(prog="python -m mcp_server", description=__doc__)
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("serve", help="serve MCP over Streamable HTTP (the default)")
    add_commands(commands)
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
        # `schema` shows the version as it is; seed --reset drops the tables before making them
        if args.command != "schema" and (args.command != "seed" or not args.reset):
            applied = database.create_schema()
            if args.command in (None, "serve"):
                from common.migrations import log_upgrade

                from .migrations import MIGRATIONS

                log_upgrade(MIGRATIONS, applied)
    if args.command not in (None, "serve"):
        from .admin import run

        with commanding(args.command, "MCP_DATABASE_URL", "the leave database"):
            return run(args, settings, database)

    from .admin import refuse_demo_tokens_in_production
    from .app import create_app

    with opening("MCP_DATABASE_URL", "the leave database"):
        refuse_demo_tokens_in_production(settings, database)
    from common import tracing

    traces = tracing.start("leave-mcp-server", endpoint=settings.otlp_traces_endpoint)
    app = create_app(settings, database)
    serve(app if traces is None else traces.around(app), settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
