"""Parsing and validating a chat-completions request.

Shape errors are answered as vLLM answers them. Transcript errors (unknown role, a tool message
that answers nothing, a tool call left unanswered) are 400s in `strict` mode, as OpenAI's API
does; `lenient` mode accepts them, as vLLM 0.32 does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from common.chat import InvalidContent, content_text

from . import prompt
from .errors import ApiError

ROLES = {"system", "developer", "user", "assistant", "tool"}


@dataclass
class ChatRequest:
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tool_choice: str | dict[str, Any]
    max_tokens: int | None
    stream: bool
    include_usage: bool
    prompt_ids: list[str]  # the rendered prompt's tokens, which the prefix cache hashes

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def forced_tool(self) -> str | None:
        if isinstance(self.tool_choice, dict):
            name: str = self.tool_choice["function"]["name"]
            return name
        return None


def parse(body: bytes, *, strict: bool, max_model_len: int) -> ChatRequest:
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise ApiError(400, f"Invalid JSON body: {exc}", "Bad Request") from None
    if not isinstance(data, dict):
        raise ApiError(400, "The request body must be a JSON object.", "Bad Request")

    model = data.get("model")
    if not isinstance(model, str):
        raise ApiError(400, "Field required: model", param="model")
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a role", param="messages")
        try:
            content_text(message.get("content"))
        except InvalidContent as error:
            raise ApiError(400, f"messages[{i}].{error}", param=f"messages[{i}].content") from None

    tools = data.get("tools") or []
    if not isinstance(tools, list) or not all(_is_function_tool(t) for t in tools):
        raise ApiError(400, "tools must be a list of function tools", param="tools")
    names = {t["function"]["name"] for t in tools}
    tool_choice = _tool_choice(data.get("tool_choice"), names)

    max_tokens = data.get("max_completion_tokens", data.get("max_tokens"))
    if max_tokens is not None and (
        not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
    ):
        raise ApiError(400, "max_tokens must be a positive integer", param="max_tokens")
    temperature = data.get("temperature")
    if temperature is not None and (
        not isinstance(temperature, int | float) or not 0 <= temperature <= 2
    ):
        raise ApiError(400, "temperature must be between 0 and 2", param="temperature")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "stream must be a boolean", param="stream")
    stream_options = data.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise ApiError(400, "stream_options must be an object", param="stream_options")

    if strict:
        check_transcript(messages)

    prompt_ids = prompt.prompt_tokens(messages, tools)
    prompt_tokens = len(prompt_ids)
    if prompt_tokens + (max_tokens or 0) > max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {prompt_tokens + (max_tokens or 0)} tokens ({prompt_tokens} in the "
            f"messages, {max_tokens or 0} in the completion). Please reduce the length of the "
            "messages or completion.",
        )
    return ChatRequest(
        model=model,
        messages=messages,
        tools=tools,
        tool_choice=tool_choice,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=bool(stream_options.get("include_usage")),
        prompt_ids=prompt_ids,
    )


def check_transcript(messages: list[dict[str, Any]]) -> None:
    """The checks OpenAI's API makes and vLLM skips."""
    unanswered: dict[str, int] = {}
    answered: set[str] = set()
    for i, message in enumerate(messages):
        role = message["role"]
        if role not in ROLES:
            raise ApiError(
                400,
                f"Invalid value for 'messages[{i}].role': '{role}'. Supported values are: "
                "'system', 'developer', 'user', 'assistant', and 'tool'.",
                param=f"messages[{i}].role",
            )
        if role != "tool" and unanswered:
            first = next(iter(unanswered))
            raise ApiError(
                400,
                "An assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(unanswered)}",
                param=f"messages[{unanswered[first]}]",
            )
        if role == "assistant":
            for call in message.get("tool_calls") or []:
                call_id = call.get("id") if isinstance(call, dict) else None
                if not isinstance(call_id, str) or not call_id:
                    raise ApiError(400, f"messages[{i}].tool_calls needs ids", param="messages")
                unanswered[call_id] = i
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in unanswered:
                what = "was already answered" if call_id in answered else "answers no earlier"
                raise ApiError(
                    400,
                    f"Invalid parameter: messages[{i}] with role 'tool' {what} assistant "
                    f"tool call (tool_call_id {call_id!r}).",
                    param=f"messages[{i}].tool_call_id",
                )
            del unanswered[call_id]
            answered.add(call_id)
    if unanswered:
        raise ApiError(
            400,
            "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {', '.join(unanswered)}",
            param="messages",
        )


def _is_function_tool(tool: Any) -> bool:
    return (
        isinstance(tool, dict)
        and tool.get("type", "function") == "function"
        and isinstance(tool.get("function"), dict)
        and isinstance(tool["function"].get("name"), str)
    )


def _tool_choice(value: Any, names: set[str]) -> str | dict[str, Any]:
    if value is None:
        return "auto" if names else "none"
    if value in ("auto", "none", "required"):
        if value == "required" and not names:
            raise ApiError(400, "tool_choice 'required' needs tools", param="tool_choice")
        return str(value)
    if isinstance(value, dict) and isinstance(value.get("function"), dict):
        name = value["function"].get("name")
        if name not in names:
            raise ApiError(
                400,
                f"Tool '{name}' has not been passed in `tools`.",
                param="tool_choice",
            )
        return value
    raise ApiError(400, f"Invalid tool_choice: {value!r}", param="tool_choice")
