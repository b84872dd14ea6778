"""The fakes the tests share: models that answer from a script, an answer, or the simulator's
generation, and tools and MCP connections that answer from handlers."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Sequence
from typing import Any

from loop.engine import ModelReply, ToolInfo, ToolResult
from modelsim import generate
from modelsim.request import parse

_call_numbers = itertools.count(1)


def call(name: str, arguments: Any = None, call_id: str | None = None) -> dict[str, Any]:
    """A tool call as a model returns it; without `call_id`, one no other call has."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return {
        "id": call_id or f"call-{name}-{next(_call_numbers)}",
        "type": "function",
        "function": {"name": name, "arguments": raw},
    }


def calls(*tool_calls: dict[str, Any]) -> ModelReply:
    return ModelReply(
        {"role": "assistant", "content": None, "tool_calls": list(tool_calls)}, "tool_calls", 10, 5
    )


def text(answer: str, finish_reason: str = "stop") -> ModelReply:
    return ModelReply({"role": "assistant", "content": answer}, finish_reason, 10, 3)


class ScriptedModel:
    """Replies from a queue; remembers every transcript it was sent. With `then_hang`, once
    the queue is spent it says so (`spent`) and never answers again."""

    def __init__(self, *replies: ModelReply | Exception, then_hang: bool = False) -> None:
        self.replies = list(replies)
        self.seen: list[list[dict[str, Any]]] = []
        self.then_hang = then_hang
        self.spent = asyncio.Event()

    async def complete(self, messages, tools, on_text=None) -> ModelReply:
        self.seen.append([dict(m) for m in messages])
        if not self.replies and self.then_hang:
            self.spent.set()
            await asyncio.Event().wait()
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        if on_text and reply.message.get("content"):
            await on_text(reply.message["content"])
        return reply


class FakeTools:
    def __init__(
        self, handlers: dict[str, Any], confirm: Sequence[str] = (), read_only: Sequence[str] = ()
    ) -> None:
        self.handlers = handlers
        self.confirm = set(confirm)
        self.read_only = set(read_only)
        self.called: list[tuple[str, dict[str, Any]]] = []
        self.running = 0
        self.max_running = 0

    async def list(self) -> list[ToolInfo]:
        return [
            ToolInfo(
                name,
                f"{name} tool",
                {"type": "object"},
                name in self.confirm,
                name in self.read_only,
            )
            for name in self.handlers
        ]

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        self.called.append((name, arguments))
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            handler = self.handlers[name]
            result = handler(arguments)
            if asyncio.iscoroutine(result):
                result = await result
            return result if isinstance(result, ToolResult) else ToolResult(str(result), False)
        finally:
            self.running -= 1


class AnsweringModel:
    """Answers every request with the same text, at once (any number of runs at a time)."""

    def __init__(self, answer: str = "好的。") -> None:
        self.answer = answer

    async def complete(self, messages, tools, on_text=None) -> ModelReply:
        return ModelReply({"role": "assistant", "content": self.answer}, "stop", 5, 2)


class SimulatedModel:
    """The simulator's generation (request parsing, policy, faults) as the loop's model."""

    def __init__(self, faults: set[str] | None = None) -> None:
        self.faults = faults or set()

    async def complete(self, messages, tools, on_text=None) -> ModelReply:
        body = {"model": "leave-copilot", "messages": messages, "tools": tools}
        request = parse(json.dumps(body).encode(), strict=True, max_model_len=32_768)
        output = generate.generate(request, self.faults)
        message: dict[str, Any] = {"role": "assistant", "content": output.content}
        if output.calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in output.calls
            ]
        return ModelReply(
            message, output.finish_reason, request.prompt_tokens, output.completion_tokens
        )


class FakeConnection:
    alive = True

    async def tools(self) -> list[ToolInfo]:
        return [ToolInfo("search_leaves", "search", {"type": "object"}, read_only=True)]

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult("[]", False)


class FakePool:
    async def connection(self, token: str) -> FakeConnection:
        return FakeConnection()


class LeaveConnection(FakeConnection):
    async def tools(self) -> list[ToolInfo]:
        return [
            ToolInfo("search_leaves", "search", {"type": "object"}, read_only=True),
            ToolInfo("update_leave_status", "update", {"type": "object"}),
        ]

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        if name == "search_leaves":
            return ToolResult('{"count": 1}', False, {"count": 1})
        return ToolResult('{"to_status": "submitted"}', False, {"to_status": "submitted"})


class LeavePool:
    async def connection(self, token: str) -> LeaveConnection:
        return LeaveConnection()
