"""Fitting a run into the model's context window, by tokens.

Counts are estimates (common.tokens, the simulator's counting rules) scaled up by what the model
reports for the prompts it was actually sent, so they err on the side of fitting. When the whole
prompt would not fit, the oldest history goes first, whole turns at a time (a tool result never
without its call); a tool result longer than its share is cut to fit, keeping its JSON valid and
saying how much was left out. What still does not fit ends the run with a clear reason instead
of an error from the model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from common.tokens import TOKENS_PER_REQUEST, count, message_tokens

CONTEXT_OVERFLOW_ANSWER = (
    "這個請求連同對話內容太長，超過模型一次能讀的長度，這次沒有完成。"
    "請開始新的對話（不帶 session_id），或把問題說得更精確後再試。"
)
TRUNCATED_NOTE = (
    "結果太長，只列出前 {shown} 筆（共 {total} 筆）。要看其他的，請用更精確的關鍵字或狀態再查詢。"
)
CUT_MARK = "…（結果太長，後面已省略）"


class ContextOverflow(Exception):
    """Even without any history the run's prompt would not fit the model's context."""

    def __init__(self, needed: int, budget: int) -> None:
        super().__init__(
            f"the prompt needs about {needed} tokens; {budget} fit (the model's context minus "
            "what is kept for the answer)"
        )


class ContextWindow:
    """A model's context size, what is kept free for its answer, and how far the estimate
    falls short of the model's own count (learnt from its usage reports; never below 1)."""

    def __init__(self, size: int, answer_reserve: int) -> None:
        self.size = size
        self.budget = max(size - answer_reserve, 1)
        self.scale = 1.0

    def observe(self, estimated: int, reported: int) -> None:
        if estimated > 0 and reported > 0:
            self.scale = max(self.scale, reported / estimated)

    def fit(
        self,
        system: dict[str, Any],
        history: Sequence[dict[str, Any]],
        current: list[dict[str, Any]],
        tools_cost: int,
    ) -> list[dict[str, Any]]:
        """The prompt, without as much of the oldest history as it takes to fit; `tools_cost`:
        the tool definitions' tokens (common.tokens.tools_tokens, counted once a run)."""
        costs = [message_tokens(m) for m in history]
        total = (
            TOKENS_PER_REQUEST
            + tools_cost
            + message_tokens(system)
            + sum(message_tokens(m) for m in current)
            + sum(costs)
        )
        start = 0
        while total * self.scale > self.budget and start < len(costs):
            total -= costs[start]
            start += 1
            while start < len(costs) and history[start].get("role") != "user":
                total -= costs[start]
                start += 1
        needed = math.ceil(total * self.scale)
        if needed > self.budget:
            raise ContextOverflow(needed, self.budget)
        return [system, *history[start:], *current]


def estimate(messages: list[dict[str, Any]], tools_cost: int) -> int:
    return TOKENS_PER_REQUEST + tools_cost + sum(message_tokens(m) for m in messages)


def cap_tool_result(text: str, structured: dict[str, Any] | None, limit: int) -> str:
    """`text` if it is at most `limit` tokens; else the structured result with its list cut
    short (valid JSON, with a note on what was left out), or the text cut short."""
    if count(text) <= limit:
        return text
    lists = [k for k, v in (structured or {}).items() if isinstance(v, list)]
    if structured is not None and len(lists) == 1:
        key = lists[0]
        items = structured[key]
        for shown in range(len(items) - 1, -1, -1):
            note = TRUNCATED_NOTE.format(shown=shown, total=len(items))
            cut = json.dumps(
                {**structured, key: items[:shown], "truncated": note}, ensure_ascii=False
            )
            if count(cut) <= limit:
                return cut
    low, high = 0, len(text)  # the longest prefix that fits, with the mark
    while low < high:
        middle = (low + high + 1) // 2
        if count(text[:middle] + CUT_MARK) <= limit:
            low = middle
        else:
            high = middle - 1
    return text[:low] + CUT_MARK
