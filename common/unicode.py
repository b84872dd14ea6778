"""Strings that are not Unicode text: JSON's `\\ud800` escape decodes (in Python's json) to a
lone UTF-16 surrogate, which no UTF-8 encoder, database or JSON answer can carry. Found at the
edge, so a request holding one is refused as malformed instead of failing deep inside."""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")
# How a surrogate can reach a decoded JSON value: only through a \u escape of D800-DFFF (a valid
# pair decodes to one astral character and is no surrogate any more).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def lone_surrogate_at(value: Any, path: str = "") -> str | None:
    """The JSON path (`messages[0].content`) of the first string in `value`, key or value,
    that holds a lone surrogate; None when every string is text."""
    if isinstance(value, str):
        return (path or "body") if _SURROGATE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            name = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and _SURROGATE.search(key):
                return path or "body"
            found = lone_surrogate_at(item, name)
            if found:
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = lone_surrogate_at(item, f"{path}[{i}]")
            if found:
                return found
    return None


def may_hold_surrogate(raw: bytes) -> bool:
    """Cheap test on a JSON body before walking what it decoded to."""
    return _SURROGATE_ESCAPE.search(raw) is not None


def surrogate_message(path: str) -> str:
    return f"{path}: holds a lone surrogate (a \\ud800-\\udfff escape), which is not text"


def printable(text: str) -> str:
    """`text` with any lone surrogate written as its escape, so it can be encoded and shown."""
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
