"""`python -m loop` serves the agent loop; `python -m loop export` writes training JSONL;
`backup` and `restore` copy the run store; `schema` shows its schema's revision."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from functools import partial
from pathlib import Path

from common.entrypoint import exit_on_startup_error, opening


def _when(value: str) -> dt.datetime:
    parsed = dt.datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


@exit_on_startup_error
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loop", description=__doc__)
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("serve", help="serve the loop HTTP API (the default)")
    export = commands.add_parser("export", help="write finished runs as chat-format JSONL")
    export.add_argument("--output", "-o", default="-", help="file to write (default: stdout)")
    export.add_argument(
        "--status",
        default="completed",
        help="completed (default), max_turns, failed, cancelled, or all",
    )
    export.add_argument("--no-tool-errors", action="store_true", help="skip runs with a tool error")
    export.add_argument(
        "--include-flagged",
        action="store_true",
        help="keep runs whose answer claims a change none of their tool calls made",
    )
    export.add_argument("--since", type=_when, help="created at or after (ISO 8601)")
    export.add_argument("--until", type=_when, help="created before (ISO 8601)")
    commands.add_parser(
        "schema", help="the schema's revision and what the next start would apply (no change)"
    )
    for name, what in (
        ("backup", "copy the run store to PATH (online; - for standard output)"),
        ("restore", "replace the run store with a backup (stop the loop first; - for stdin)"),
    ):
        command = commands.add_parser(name, help=what)
        command.add_argument("path", type=Path)
    args = parser.parse_args(argv)

    from common.entrypoint import load_settings, serve

    from .settings import LoopSettings

    settings = load_settings(LoopSettings)
    if settings is None:
        return 2

    if args.command in ("backup", "restore"):
        from common import backup

        from .store import Base

        act = backup.backup if args.command == "backup" else backup.restore
        said = act(settings.store_url, args.path, Base.metadata.tables, "the run store")
        # with `-` standard output may carry the backup itself
        print(said, file=sys.stderr if args.path == backup.STDIO else sys.stdout)
        return 0
    if args.command == "schema":
        from common.migrations import describe
        from common.sqlite import create_engine_for

        from .migrations import MIGRATIONS

        with opening("LOOP_STORE_URL", "the run store"):
            engine = create_engine_for(settings.store_url)
            try:
                print(describe(engine, MIGRATIONS))
            finally:
                engine.dispose()
        return 0
    if args.command == "export":
        from .export import export_runs
        from .store import SyncRunStore

        with opening("LOOP_STORE_URL", "the run store"):
            # a command: nothing to schedule, the store is read on this thread
            exported = SyncRunStore(settings.store_url)
        status = None if args.status == "all" else args.status
        out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")  # noqa: SIM115
        try:
            count = export_runs(
                exported,
                out,
                status=status,
                without_tool_errors=args.no_tool_errors,
                since=args.since,
                until=args.until,
                include_flagged=args.include_flagged,
            )
        finally:
            if out is not sys.stdout:
                out.close()
            exported.dispose()
        print(f"exported {count} runs", file=sys.stderr)
        return 0

    import logging

    from common import tracing

    from .app import create_app, drain
    from .store import RunStore

    for chatty in ("httpx", "httpx2"):  # one line per request is noise
        logging.getLogger(chatty).setLevel(logging.WARNING)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    # `auto` resolved once, before serving: an address that cannot be found stops the start
    settings = settings.model_copy(update={"peer_url": settings.peer_address()})
    with opening("LOOP_STORE_URL", "the run store"):
        store = RunStore(settings.store_url)
    traces = tracing.start(
        "leave-loop",
        endpoint=settings.otlp_traces_endpoint,
        log=logging.getLogger("loop.trace") if settings.trace_log else None,
    )
    app = create_app(settings, store)
    wrapped = app if traces is None else traces.around(app)
    serve(wrapped, settings, draining=partial(drain, app))
    return 0


if __name__ == "__main__":
    sys.exit(main())
