"""What every `python -m <service>` does: read its settings, then serve its app."""

from __future__ import annotations

import sys
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings

SettingsT = TypeVar("SettingsT", bound=BaseSettings)


def load_settings(settings_class: type[SettingsT]) -> SettingsT | None:
    """The settings from the environment, or None after printing what is wrong with them."""
    try:
        return settings_class()
    except ValidationError as exc:
        for error in exc.errors():
            where = ".".join(str(part) for part in error["loc"]) or settings_class.__name__
            print(f"configuration error: {where}: {error['msg']}", file=sys.stderr)
        return None


def serve(app: Any, host: str, port: int, log_level: str) -> None:
    import uvicorn

    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level.lower(),
        # Tokens travel in headers, never in URLs; an access log line per request is noise.
        access_log=False,
    )
