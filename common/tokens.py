"""A deterministic stand-in tokenizer: the simulator counts usage, streams and times with it;
the loop estimates what fits into the model's context with it (scaled by what the real model
reports, see loop.context).

Rules (documented in docs/simulator.md, "Token counting"):
- every CJK ideograph, kana, hangul syllable or full-width punctuation mark is one token;
- a run of ASCII letters is one token per started 4 characters ("leave" → 2, "id" → 1);
- a run of digits is one token per started 3 digits ("2026" → 2);
- any other non-space character (punctuation, symbols) is one token;
- whitespace is free but sticks to the following piece when text is split for streaming.
Real BPE tokenizers give ~1–1.5 tokens per CJK character and ~4 characters per English token, so
these counts are the right order of magnitude without shipping a vocabulary.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from .chat import content_text

_PIECE = re.compile(
    r"\s*(?:"
    r"[\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]"
    r"|[A-Za-z]{1,4}"
    r"|[0-9]{1,3}"
    r"|[^\sA-Za-z0-9]"
    r")|\s+$",
    re.UNICODE,
)

# Chat-template framing per message and per request, as in ChatML-style templates.
TOKENS_PER_MESSAGE = 4
TOKENS_PER_REQUEST = 3


@lru_cache(maxsize=4096)
def _split_cached(text: str) -> tuple[str, ...]:
    return tuple(_PIECE.findall(text))


def split(text: str) -> list[str]:
    """Cut `text` into token pieces; ''.join(split(t)) == t."""
    return list(_split_cached(text)) if len(text) <= 2048 else _PIECE.findall(text)


@lru_cache(maxsize=8192)
def count(text: str) -> int:
    if not text:
        return 0
    pieces = _PIECE.findall(text)
    # a trailing whitespace-only piece is not a token
    return len(pieces) - (1 if pieces and not pieces[-1].strip() else 0)


def message_tokens(message: dict[str, Any]) -> int:
    """One chat message: framing, text, and the name and arguments of its tool calls."""
    n = TOKENS_PER_MESSAGE + count(content_text(message.get("content")))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {} if isinstance(call, dict) else {}
        n += count(str(function.get("name", "")))
        n += count(str(function.get("arguments", "")))
    return n


def tools_tokens(tools: list[dict[str, Any]]) -> int:
    """The tool definitions, as a chat template renders them (their JSON)."""
    return count(json.dumps(tools, ensure_ascii=False)) if tools else 0


def prompt_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
    return TOKENS_PER_REQUEST + tools_tokens(tools) + sum(message_tokens(m) for m in messages)
