"""OpenAI chat-message helpers shared by the simulator and the loop."""

from __future__ import annotations

from typing import Any


def content_text(content: Any) -> str:
    """The text of a message's `content`: a string, or a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""
