"""What keeps bad bearer tokens cheap: a short memory of refused tokens (by hash only) and a
per-client budget of authentication failures. Checking an unknown token costs an MCP
connection; neither a repeated bad token nor a flood of new ones may cost that every time."""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque

MAX_ENTRIES = 10_000  # bounds the memory either structure can take


class RejectedTokens:
    """Token hashes the MCP server refused, each remembered for `seconds`."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._until: OrderedDict[str, float] = OrderedDict()

    def add(self, token_hash: str) -> None:
        if self._seconds <= 0:
            return
        self._until[token_hash] = time.monotonic() + self._seconds
        self._until.move_to_end(token_hash)
        while len(self._until) > MAX_ENTRIES:
            self._until.popitem(last=False)

    def __contains__(self, token_hash: object) -> bool:
        if not isinstance(token_hash, str):
            return False
        until = self._until.get(token_hash)
        if until is None:
            return False
        if until < time.monotonic():
            del self._until[token_hash]
            return False
        return True


class FailureLimiter:
    """At most `limit` authentication failures per client address in any `window` seconds."""

    def __init__(self, limit: int, window: float) -> None:
        self._limit = limit
        self._window = window
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def failed(self, client: str) -> None:
        times = self._failures.setdefault(client, deque())
        times.append(time.monotonic())
        while len(times) > self._limit:
            times.popleft()
        self._failures.move_to_end(client)
        while len(self._failures) > MAX_ENTRIES:
            self._failures.popitem(last=False)

    def retry_after(self, client: str) -> int:
        """Seconds until this client may fail again; 0 when it may now."""
        times = self._failures.get(client)
        if not times or len(times) < self._limit:
            return 0
        wait = times[0] + self._window - time.monotonic()
        if wait <= 0:
            del self._failures[client]
            return 0
        return math.ceil(wait)
