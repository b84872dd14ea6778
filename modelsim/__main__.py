"""`python -m modelsim` serves the simulator (settings from SIM_* variables)."""

from __future__ import annotations

import sys

from pydantic import ValidationError


def main() -> int:
    from .settings import SimSettings

    try:
        settings = SimSettings()
    except ValidationError as exc:
        for error in exc.errors():
            print(f"configuration error: {error['loc'][0]}: {error['msg']}", file=sys.stderr)
        return 2

    import uvicorn

    from .app import create_app

    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
