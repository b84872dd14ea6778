"""Request bodies read as JSON whose every string is Unicode text: a lone surrogate escape
(`"\\ud800"`, valid JSON) is refused where the body is read, as malformed JSON in the route's
error shape, before it can reach a run, the store or an error body that echoes it."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from common.unicode import lone_surrogate_at, may_hold_surrogate, surrogate_message


class UnicodeJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            raw = await self.body()
            value = json.loads(raw)
            if may_hold_surrogate(raw):
                where = lone_surrogate_at(value)
                if where is not None:
                    doc = raw.decode("utf-8", "replace")
                    raise json.JSONDecodeError(surrogate_message(where), doc, 0)
            self._json = value
        return self._json


class UnicodeJSONRoute(APIRoute):
    """FastAPI's documented way to change how a route reads its request."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def read_as_text(request: Request) -> Response:
            return await handler(UnicodeJSONRequest(request.scope, request.receive))

        return read_as_text
