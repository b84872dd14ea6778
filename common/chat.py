"""OpenAI chat-message helpers shared by the simulator and the loop."""

from __future__ import annotations

from typing import Any


class InvalidContent(ValueError):
    """A message's `content` is neither text nor a list of content parts with string text."""


def content_text(content: Any) -> str:
    """The text of a message's `content`: a string, a list of content parts, or null.
    Raises InvalidContent (saying which part is wrong) for anything else."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidContent("content must be a string or a list of content parts")
    texts = []
    for i, part in enumerate(content):
        if not isinstance(part, dict):
            raise InvalidContent(f"content[{i}] must be an object")
        if not isinstance(part.get("type"), str):
            raise InvalidContent(f"content[{i}].type must be a string")
        text = part.get("text", "")
        if not isinstance(text, str) or (part["type"] == "text" and "text" not in part):
            raise InvalidContent(f"content[{i}].text must be a string")
        texts.append(text)
    return "".join(texts)
