"""Server-sent events: the one writer every server that streams uses (the loop's runs, its
OpenAI-compatible facade, the simulator) and the one reader every client and test uses.

The reader follows the HTML standard's parsing rules for what these servers send: `event:` and
`data:` fields (several `data:` lines join with a newline), comments (`:` lines, keep-alives)
skipped, CRLF or LF, and an event only once its blank line has arrived, however the bytes were
cut on the way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

# The OpenAI streaming protocol's last event.
DONE = "[DONE]"


@dataclass(frozen=True)
class Event:
    event: str  # "message" when the server named none
    data: str
    at: float = 0.0  # when the bytes that completed it arrived (a perf_counter), if stamped

    def json(self) -> Any:
        return json.loads(self.data)


def frame(data: Any, event: str | None = None, *, compact: bool = False) -> bytes:
    """One event on the wire: `data` as JSON (a str as it is), UTF-8 unescaped; `compact` drops
    the spaces after separators, as vLLM's own chunks have none."""
    if isinstance(data, str):
        text = data
    else:
        separators = (",", ":") if compact else None
        text = json.dumps(data, ensure_ascii=False, separators=separators, default=str)
    lines = [f"event: {event}"] if event else []
    lines += [f"data: {line}" for line in text.split("\n")]
    return ("\n".join(lines) + "\n\n").encode()


DONE_FRAME = frame(DONE)


class Parser:
    """Feed it bytes as they arrive; it yields whole events."""

    def __init__(self) -> None:
        self._buffer = b""
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes, at: float = 0.0) -> Iterator[Event]:
        self._buffer += chunk
        while True:
            end = self._buffer.find(b"\n")
            if end < 0:
                return
            line = self._buffer[:end].rstrip(b"\r").decode("utf-8")
            self._buffer = self._buffer[end + 1 :]
            if not line:
                if self._data:
                    yield Event(self._event or "message", "\n".join(self._data), at)
                self._event, self._data = "", []
            elif not line.startswith(":"):  # a comment is a keep-alive
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "event":
                    self._event = value
                elif name == "data":
                    self._data.append(value)


def events(lines: Iterable[str]) -> Iterator[Event]:
    """The events in a response's lines (httpx's `iter_lines()`)."""
    parser = Parser()
    for line in lines:
        yield from parser.feed(f"{line}\n".encode())
