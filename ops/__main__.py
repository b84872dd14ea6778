"""`python -m ops layout|preflight|check-stack|urls|podman|promote|rollback` — what a site's
make up, make up-sim, make down, make promote and the rest call."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import compose


def main(argv: list[str] | None = None) -> int:
    try:
        return _command(argv)
    except compose.ComposeError as error:  # what Compose said, in one line
        print(f"✗ {error}", file=sys.stderr)
        return 2


def _command(argv: list[str] | None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if words[:1] == ["podman"]:  # `docker compose`'s arguments pass through untouched
        from . import podman

        return podman.main(words[1:])
    args = _parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    return run(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ops", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, run: Callable[[argparse.Namespace], int], help: str) -> Any:
        sub = commands.add_parser(name, help=help)
        sub.set_defaults(run=run)
        return sub

    layout = command(
        "layout", _layout, "write deploy/compose.layout.yaml: the replicas deploy/.env asks for"
    )
    layout.add_argument("--output", type=Path, default=None, help="default: the deploy/ one")
    preflight = command("preflight", _preflight, "check what `make up` needs")
    check = command("check-stack", _check_stack, "is every compose service ready?")
    urls_command = command("urls", _urls, "print the URLs of the compose stack")
    for sub in (layout, preflight, check, urls_command):
        sub.add_argument("--sim", action="store_true", help="the simulator layout (no GPU)")
        sub.add_argument("--env-file", type=Path, default=None, help="default: deploy/.env")
    for sub in (preflight, check):
        sub.add_argument(
            "--engine", choices=("docker", "podman"), default="docker", help="make's ENGINE"
        )
    check.add_argument(
        "--file", action="append", type=Path, default=[], help="a site compose override"
    )
    check.add_argument("--timeout", type=float, default=120, help="seconds to wait for health")
    promote = command(
        "promote",
        _promote,
        "gate a candidate replica, put it into the router's rotation, "
        "drain and take out the serving ones, record it (docs/evaluation.md)",
    )
    promote.add_argument(
        "--candidate",
        required=True,
        help="the candidate's URL as the router reaches it (http://host:port)",
    )
    promote.add_argument(
        "--revision",
        default="",
        help="its name in the record and on the dashboards; default: vLLM's root",
    )
    promote.add_argument(
        "--model",
        default="",
        help="the served name the loop asks for; default: the serving replicas'",
    )
    promote.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="a report.json to gate against; default: the record's, or the "
        "serving model gated first",
    )
    promote.add_argument(
        "--thresholds", default="", help="the gate's thresholds file (python -m evals --thresholds)"
    )
    promote.add_argument(
        "--gate-args", default="", help="more arguments for python -m evals (e.g. '--samples 3')"
    )
    rollback = command("rollback", _rollback, "back to the replicas the last promote took out")
    for sub in (promote, rollback):
        sub.add_argument(
            "--router",
            default="http://127.0.0.1:8000",
            help="vllm-router's base URL (its worker API)",
        )
        sub.add_argument(
            "--state-dir",
            type=Path,
            default=Path("var/promote"),
            help="where the record, the lock and the gate's reports live",
        )
        sub.add_argument(
            "--drain-timeout",
            type=float,
            default=300.0,
            help="seconds to wait for a replica out of rotation to finish",
        )
    return parser


def _layout(args: argparse.Namespace) -> int:
    from .layout import LAYOUT_FILE, LayoutError, write_for
    from .preflight import ENV_FILE

    try:
        planned = write_for(
            args.env_file or ENV_FILE, sim=args.sim, path=args.output or LAYOUT_FILE
        )
    except LayoutError as error:
        print(f"✗ {error}", file=sys.stderr)
        return 2
    print(f"layout: {planned.describe()} → {(args.output or LAYOUT_FILE).name}")
    return 0


def _preflight(args: argparse.Namespace) -> int:
    from .preflight import ENV_FILE, problems, warnings

    for warning in warnings(args.env_file or ENV_FILE):
        print(f"⚠ {warning}", file=sys.stderr)
    found = problems(sim=args.sim, env_file=args.env_file or ENV_FILE, engine=args.engine)
    for problem in found:
        print(f"✗ {problem}", file=sys.stderr)
    if not found:
        print("✓ prerequisites present")
    return 1 if found else 0


def _check_stack(args: argparse.Namespace) -> int:
    from .preflight import ENV_FILE
    from .stackcheck import Stack, report, wait_until_ready

    compose_stack = Stack(args.sim, args.env_file or ENV_FILE, tuple(args.file), engine=args.engine)
    unready = wait_until_ready(compose_stack, args.timeout)
    if unready:
        report(compose_stack, unready)
        return 1
    print("✓ every service is ready")
    return 0


def _urls(args: argparse.Namespace) -> int:
    from .preflight import ENV_FILE, published_ports, urls

    project = compose.config(sim=args.sim, env_file=args.env_file or ENV_FILE)
    print("\n".join(urls(published_ports(project))))
    return 0


def _promote(args: argparse.Namespace) -> int:
    from .promote import Refused, promote

    try:
        promote(
            _options(args),
            args.candidate,
            revision=args.revision,
            model=args.model,
            baseline=args.baseline,
        )
    except Refused as refusal:
        print(f"✗ promote refused: {refusal}", file=sys.stderr)
        return 2
    return 0


def _rollback(args: argparse.Namespace) -> int:
    from .promote import Refused, rollback

    try:
        rollback(_options(args))
    except Refused as refusal:
        print(f"✗ rollback refused: {refusal}", file=sys.stderr)
        return 2
    return 0


def _options(args: argparse.Namespace) -> Any:
    from .promote import Options

    gate_args = tuple(getattr(args, "gate_args", "").split())
    if getattr(args, "thresholds", ""):
        gate_args += ("--thresholds", args.thresholds)
    return Options(args.router, args.state_dir, args.drain_timeout, gate_args)


if __name__ == "__main__":
    sys.exit(main())
