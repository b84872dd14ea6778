"""A chat as a sequence of the stand-in tokenizer's tokens (common/tokens.py).

The simulator counts a prompt's tokens as the length of this sequence, and its prefix cache
hashes the same sequence, so a hit can never cover tokens the count does not have. The layout
follows a ChatML template (Qwen's, which the served model family uses):

    [tools]                       after a leading system message's text, else first
    <|im_start|> role \\n text [tool call names and arguments] <|im_end|>     per message
    <|im_start|> assistant \\n                                               the generation prompt

which is exactly `tokens.prompt_tokens`: 4 framing tokens per message, 3 per request. A turn's
answer, as the next turn renders it back, continues that generation prompt, so a session's
prompts extend each other token for token.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from common import tokens
from common.chat import content_text

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
NEWLINE = "\n"
GENERATION_PROMPT = (IM_START, "assistant", NEWLINE)
_SYSTEM_ROLES = ("system", "developer")


def text_tokens(text: str) -> list[str]:
    """The pieces `tokens.count` counts: a trailing whitespace-only piece is no token."""
    pieces = tokens.split(text)
    if pieces and not pieces[-1].strip():
        pieces.pop()
    return pieces


def prompt_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[str]:
    tool_part = text_tokens(_tools_json(tools)) if tools else []
    sequence: list[str] = []
    if not (messages and messages[0].get("role") in _SYSTEM_ROLES):
        sequence += tool_part
        tool_part = []
    for message in messages:
        role = str(message.get("role"))
        sequence += (IM_START, role, NEWLINE)
        sequence += _body(content_text(message.get("content")), message.get("tool_calls") or [])
        if tool_part:  # the tools go into the leading system message, as Qwen's template puts them
            sequence += tool_part
            tool_part = []
        sequence.append(IM_END)
    sequence += GENERATION_PROMPT
    return sequence


def answer_tokens(content: str, calls: Iterable[tuple[str, str]], *, stopped: bool) -> list[str]:
    """An answer's tokens as the next turn's prompt renders the assistant message back: its
    text, its calls' names and arguments, and the end-of-message token the model stops with
    (absent when it was cut off at `max_tokens`)."""
    body = _body(content, [{"function": {"name": n, "arguments": a}} for n, a in calls])
    return [*body, IM_END] if stopped else body


def _body(content: str, calls: list[Any]) -> list[str]:
    body = text_tokens(content)
    for call in calls:
        function = call.get("function") or {} if isinstance(call, dict) else {}
        body += text_tokens(str(function.get("name", "")))
        body += text_tokens(str(function.get("arguments", "")))
    return body


def _tools_json(tools: list[dict[str, Any]]) -> str:
    return json.dumps(tools, ensure_ascii=False)  # as `tokens.tools_tokens` counts them
