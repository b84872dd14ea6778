"""`python -m modelsim` serves the simulator (settings from SIM_* variables)."""

from __future__ import annotations

import argparse
import sys

from common.entrypoint import exit_on_startup_error, load_settings, serve


@exit_on_startup_error
def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(
        prog="python -m modelsim",
        description="Serve the vLLM-compatible simulator. Settings come from SIM_* variables "
        "(see docs/configuration.md).",
    ).parse_args(argv)
    from .app import create_app
    from .settings import SimSettings

    settings = load_settings(SimSettings)
    if settings is None:
        return 2
    from common import tracing

    traces = tracing.start("modelsim", endpoint=settings.otlp_traces_endpoint)
    app = create_app(settings)
    serve(app if traces is None else traces.around(app), settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
