"""`python -m modelsim` serves the simulator (settings from SIM_* variables)."""

from __future__ import annotations

import sys

from common.entrypoint import exit_on_startup_error, load_settings, serve


@exit_on_startup_error
def main() -> int:
    from .app import create_app
    from .settings import SimSettings

    settings = load_settings(SimSettings)
    if settings is None:
        return 2
    serve(create_app(settings), settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
