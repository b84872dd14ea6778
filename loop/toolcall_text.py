"""Tool calls the model wrote as text: how to recognise them, whole, several or cut off.

A model served without the tool-call parser of its format (or a fine-tune whose format no
parser reads) writes its calls into `content`: tagged (`<tool_call>`), as a JSON object, one
object per line, a JSON array, inside a ```json fence, or cut off by `max_tokens`. The
loop must never hand any of these to the user as an answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator
from typing import Any

TAGGED_CALL = re.compile(r"<tool_call>|<\|python_tag\|>|\[TOOL_CALLS\]")
# what a tool-call text can start with (after white space)
OPENINGS = ("{", "[", "```", "<tool_call>", "<|python_tag|>", "[TOOL_CALLS]")
_NAMED = re.compile(r'"name"\s*:\s*"([^"\\]+)"')


def _json_values(text: str) -> Iterator[Any]:
    """Every JSON object or array that starts somewhere in the text and parses."""
    decoder = json.JSONDecoder()
    position = 0
    while True:
        starts = [i for i in (text.find("{", position), text.find("[", position)) if i >= 0]
        if not starts:
            return
        start = min(starts)
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            position = start + 1
            continue
        yield value
        position = end


def _is_call(value: Any, tools: Collection[str]) -> bool:
    return (
        isinstance(value, dict)
        and value.get("name") in tools
        and ("arguments" in value or "parameters" in value)
    )


def looks_like_tool_call(text: str, tools: Collection[str]) -> bool:
    """True when the text carries one or more calls of known tools, complete or cut off."""
    if not text:
        return False
    if TAGGED_CALL.search(text):
        return True
    for value in _json_values(text):
        calls = value if isinstance(value, list) else [value]
        if any(_is_call(call, tools) for call in calls):
            return True
    # cut off (finish_reason length) or otherwise unparsable: a call's opening is enough
    stripped = text.lstrip()
    if stripped.startswith(OPENINGS):
        return any(name in tools for name in _NAMED.findall(stripped))
    return False


def could_open_tool_call(text: str) -> bool:
    """Whether text seen so far may still turn out to be a tool call written as text.

    A streamed turn holds its text back while this is true, so a client never sees the first
    tokens of a call (``` json {"name": …) as answer text.
    """
    stripped = text.lstrip()
    return not stripped or any(
        stripped.startswith(opening) or opening.startswith(stripped) for opening in OPENINGS
    )


def content_of_tool_turn(content: str) -> str:
    """The text a turn that ends in tool calls keeps: none of it if it is the calls' own text.

    A parser that recognises a call only after some tokens leaves those tokens in streamed
    content but not in a whole reply; dropping them keeps both transcripts the same.
    """
    kept = []
    for line in content.splitlines(keepends=True):
        if line.strip() and line.lstrip().startswith(OPENINGS):
            break  # from here on it is the calls' text
        kept.append(line)
    return "".join(kept).rstrip()
