"""From a request to the output the simulated model emits: policy, tool_choice, faults, tokens."""

from __future__ import annotations

import datetime as dt
import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from common import tokens
from common.contract import LeaveStatus, ToolName

from . import policy
from .errors import ApiError
from .faults import FAULTS
from .request import ChatRequest

UNKNOWN_TOOL_NAME = "delete_all_leaves"
GUESSED_ID = "LV-123456"


@dataclass
class OutCall:
    id: str
    name: str
    arguments: str  # a JSON string, as the OpenAI API carries it (possibly broken by a fault)


@dataclass
class Piece:
    """One generated token as streamed: text, the start of a tool call, or argument text."""

    kind: str  # "text" | "tool_start" | "tool_args"
    value: str
    index: int = 0


@dataclass
class Output:
    content: str
    calls: list[OutCall]
    pieces: list[Piece]
    finish_reason: str
    faults: set[str] = field(default_factory=set)

    @property
    def completion_tokens(self) -> int:
        return len(self.pieces)


def parse_faults(value: str) -> set[str]:
    faults = {f.strip() for f in value.split(",") if f.strip()}
    unknown = faults - FAULTS
    if unknown:
        raise ApiError(
            400,
            f"Unknown fault {', '.join(sorted(unknown))}; known: {', '.join(sorted(FAULTS))}",
            param="x-sim-fault",
        )
    return faults


def generate(request: ChatRequest, faults: set[str]) -> Output:
    offered = {t["function"]["name"] for t in request.tools}
    turn = policy.read_turn(request.messages, request.tools)
    if request.tool_choice == "none":
        turn.offered = set()
    decision = policy.decide(turn)
    decision = _rewrite(decision, faults, turn, offered)
    decision = _enforce_tool_choice(decision, request, turn)

    if not decision.tool_calls:
        return _text_output(decision.text or "", request.max_tokens, faults)

    calls = [
        OutCall(f"chatcmpl-tool-{secrets.token_hex(8)}", c.name, _dump(c.arguments))
        for c in decision.tool_calls
    ]
    if "malformed_arguments" in faults:
        calls[0].arguments = calls[0].arguments[:-1]  # the dropped "}" seen from real servers
    if "tool_call_as_text" in faults:  # vLLM without a matching --tool-call-parser
        return _text_output(_hermes_text(calls), request.max_tokens, faults)

    pieces: list[Piece] = []
    for index, call in enumerate(calls):
        pieces.append(Piece("tool_start", call.name, index))
        pieces.extend(Piece("tool_args", p, index) for p in tokens.split(call.arguments))
    if request.max_tokens is not None and len(pieces) > request.max_tokens:
        # Cut off mid-call: the parser finds no complete call and returns the raw text.
        cut = pieces[: request.max_tokens]
        raw = "".join(
            f'<tool_call>\n{{"name": "{p.value}", "arguments": '
            if p.kind == "tool_start"
            else p.value
            for p in cut
        )
        return Output(raw, [], [Piece("text", p.value) for p in cut], "length", faults)
    return Output("", calls, pieces, "tool_calls", faults)


def _text_output(text: str, max_tokens: int | None, faults: set[str]) -> Output:
    parts = tokens.split(text) or [""]
    finish = "stop"
    if max_tokens is not None and len(parts) > max_tokens:
        parts, finish = parts[:max_tokens], "length"
    return Output("".join(parts), [], [Piece("text", p) for p in parts], finish, faults)


def _rewrite(
    decision: policy.Decision, faults: set[str], turn: policy.Turn, offered: set[str]
) -> policy.Decision:
    calls = list(decision.tool_calls)
    first_step = not turn.calls
    if "guessed_id" in faults and first_step and ToolName.UPDATE_LEAVE_STATUS in offered:
        arguments = {"leave_id": GUESSED_ID, "status": LeaveStatus.SUBMITTED}
        calls = [policy.ToolCall(ToolName.UPDATE_LEAVE_STATUS, arguments)]
    if "skip_step" in faults:
        calls = [
            policy.ToolCall(c.name, {**c.arguments, "status": LeaveStatus.APPROVED})
            if c.name == ToolName.UPDATE_LEAVE_STATUS
            and c.arguments.get("status") == LeaveStatus.SUBMITTED
            else c
            for c in calls
        ]
    if "endless_tool_calls" in faults and not calls and ToolName.SEARCH_LEAVES in offered:
        keyword = policy.extract_keyword(turn.request)
        calls = [policy.ToolCall(ToolName.SEARCH_LEAVES, {"keyword": keyword})]
    if "parallel_tool_calls" in faults and first_step and calls:
        extra = [
            policy.ToolCall(name, {})
            for name in (ToolName.GET_LEAVE_BALANCE,)
            if name in offered and all(c.name != name for c in calls)
        ]
        calls = calls + extra
    if "unknown_tool" in faults and calls:
        calls[0] = policy.ToolCall(UNKNOWN_TOOL_NAME, calls[0].arguments)
    if calls == list(decision.tool_calls):
        return decision
    return policy.Decision(text="", tool_calls=tuple(calls))


def _enforce_tool_choice(
    decision: policy.Decision, request: ChatRequest, turn: policy.Turn
) -> policy.Decision:
    forced = request.forced_tool
    if forced:
        chosen = [c for c in decision.tool_calls if c.name == forced][:1]
        if not chosen:
            chosen = [policy.ToolCall(forced, _synthesise(forced, request, turn))]
        return policy.Decision(tool_calls=tuple(chosen))
    if request.tool_choice == "required" and not decision.tool_calls:
        names = [t["function"]["name"] for t in request.tools]
        name = ToolName.SEARCH_LEAVES if ToolName.SEARCH_LEAVES in names else names[0]
        return policy.Decision(
            tool_calls=(policy.ToolCall(name, _synthesise(name, request, turn)),)
        )
    return decision


def _synthesise(name: str, request: ChatRequest, turn: policy.Turn) -> dict[str, Any]:
    """Arguments for a forced tool, filled from the request and the tool's JSON schema."""
    schema = next(
        t["function"].get("parameters") or {}
        for t in request.tools
        if t["function"]["name"] == name
    )
    properties = schema.get("properties") or {}
    ids = policy.LEAVE_ID.findall(turn.history_text + " ".join(turn.results) + turn.request)
    arguments: dict[str, Any] = {}
    for prop in schema.get("required") or list(properties):
        spec = properties.get(prop) or {}
        kind = spec.get("type", "string")
        if prop == "keyword":
            arguments[prop] = policy.extract_keyword(turn.request)
        elif "id" in prop:
            arguments[prop] = ids[-1] if ids else GUESSED_ID
        elif "date" in prop:
            arguments[prop] = dt.date.today().isoformat()
        elif kind in ("integer", "number"):
            arguments[prop] = 0
        elif kind == "boolean":
            arguments[prop] = False
        else:
            arguments[prop] = spec.get("enum", [""])[0] if spec.get("enum") else ""
    return arguments


def _dump(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False)


def _hermes_text(calls: list[OutCall]) -> str:
    return "\n".join(
        f'<tool_call>\n{{"name": "{c.name}", "arguments": {c.arguments}}}\n</tool_call>'
        for c in calls
    )
