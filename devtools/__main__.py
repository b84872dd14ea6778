"""`python -m devtools dev|stop|status|demo` — the local stack (no Docker) and the demo, what
make dev, make stop and make demo call."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from ops import compose

from . import prometheus
from .localstack import ROUTER, RUN_DIR, LocalService, LocalStack, plan


def local_services() -> list[LocalService]:
    project = compose.config(sim=True, env_file=compose.EXAMPLE_ENV)
    model_port = os.environ.get("LOCAL_MODEL_PORT")
    services = plan(project, RUN_DIR, int(model_port) if model_port else None)
    monitor = prometheus.local_service(project, services, RUN_DIR)
    return services + ([monitor] if monitor else [])


def print_urls(services: list[LocalService]) -> None:
    by_name = {s.name: s for s in services}
    loop, mcp, model = by_name["loop"].url, by_name["mcp-server"].url, by_name[ROUTER].url
    replicas = "  ".join(f"{s.name} {s.url}" for s in services if s.name in replica_names(services))
    if "prometheus" in by_name:
        monitor = f"{by_name['prometheus'].url}   (scrape config, rules, alerts: monitoring/)"
    else:
        monitor = f"not installed, so not started: {prometheus.INSTALL_HINT}"
    print(
        "\nThe local stack is running (simulator in place of vLLM):\n"
        f"  loop API        {loop}          OpenAPI docs: {loop}/docs\n"
        f"  MCP server      {mcp}/mcp\n"
        f"  model (router)  {model}/v1   replicas: {replicas} (simulators)\n"
        f"  metrics         {loop}/metrics  {mcp}/metrics  <replica>/metrics\n"
        f"  Prometheus      {monitor}\n"
        f"  logs            {RUN_DIR.relative_to(compose.REPO_ROOT)}/logs/\n"
        f'Try: .venv/bin/python -m loop.cli --url {loop} "把我那張家庭旅遊的特休送出審核"\n'
        "Stop it with: make stop"
    )


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        run: Callable[[argparse.Namespace], int] = args.run
        return run(args)
    except compose.ComposeError as error:  # what Compose said, in one line
        print(f"✗ {error}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m devtools", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, run: Callable[[argparse.Namespace], int], help: str) -> Any:
        sub = commands.add_parser(name, help=help)
        sub.set_defaults(run=run)
        return sub

    dev = command("dev", _dev, "start the local stack (no Docker)")
    dev.add_argument("--reset", action="store_true", help="start from fresh demo data")
    command("stop", _stop, "stop the local stack's processes")
    command("status", _status, "which local services are running")
    demo = command(
        "demo", _demo, "fresh local stack + the seed scenarios through the loop + a load sweep"
    )
    demo.add_argument("--no-load", action="store_true", help="skip the closing load sweep")
    return parser


def _stop(_: argparse.Namespace) -> int:
    stopped = LocalStack().stop()
    print(f"stopped: {', '.join(stopped)}" if stopped else "no local stack was running")
    return 0


def _status(_: argparse.Namespace) -> int:
    running = LocalStack().running()
    print(f"running: {', '.join(running)}" if running else "not running")
    return 0 if running else 1


def _dev(args: argparse.Namespace) -> int:
    services = local_services()
    LocalStack().up(services, reset=args.reset)
    print_urls(services)
    return 0


def _demo(args: argparse.Namespace) -> int:
    """A fresh stack every time, so the scenarios find the seeded leaves as they were."""
    from .demo import run_scenarios

    local, services = LocalStack(), local_services()
    stopped = local.stop()
    if stopped:
        print(f"restarting the local stack (stopped {', '.join(stopped)})")
    local.up(services, reset=True)
    loop_url = _url(services, "loop")
    ok = run_scenarios(loop_url)
    monitor = next((s for s in services if s.name == "prometheus"), None)
    if monitor is not None:
        engines = [_url(services, name) for name in replica_names(services)]
        prometheus.print_demo_figures(_url(services, "prometheus"), loop_url, engines)
    swept = True
    if not args.no_load:
        from .sweep import SweepError, run_sweep

        try:
            run_sweep(next(s.environment for s in services if s.name == "mcp-server"))
        except SweepError as error:
            swept = False
            print(f"\nthe load sweep failed: {error}", file=sys.stderr)
    print_urls(services)
    if not ok:
        print("\nsome scenarios did not go as expected: see above and .run/logs/", file=sys.stderr)
    if not swept:
        print(
            "\nthe load sweep failed (see above); `make demo DEMO_LOAD=0` skips it",
            file=sys.stderr,
        )
    return 0 if ok and swept else 1


def replica_names(services: list[LocalService]) -> list[str]:
    return [s.name for s in services if s.name not in (ROUTER, "prometheus") and "vllm" in s.name]


def _url(services: list[LocalService], name: str) -> str:
    url = next(s.url for s in services if s.name == name)
    if url is None:
        raise RuntimeError(f"the local {name} publishes no port")
    return url


if __name__ == "__main__":
    sys.exit(main())
