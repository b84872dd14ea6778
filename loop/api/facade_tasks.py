"""A chat front end's housekeeping requests (a chat's title, its tags, suggested follow-ups):
served by the model alone, never as an agent run. No tools, no MCP connection, no run record,
nothing exported; the bearer token is still required.

The site points the front end's task model at the facade's plain model id
(LOOP_TASK_MODEL_NAME); the same requests sent to the agent's id are recognised by Open WebUI's
own task prompts and served the same way, so a front end left on its default (the chat's own
model does its housekeeping) never starts a run with them either.
"""

from __future__ import annotations

from typing import Any

# Open WebUI's task prompts (title, tags, follow-ups, search queries, autocompletion, image
# prompts) open with this line and quote the chat between these tags.
OPEN_WEBUI_TASK_OPENING = "### Task:"
OPEN_WEBUI_CHAT_HISTORY = "<chat_history>"
# Open WebUI's prompt that asks a model to pick among the front end's own tools (its default,
# non-native function calling): answered "none" without asking the model — the agent acts
# with the leave MCP server's tools only.
OPEN_WEBUI_TOOL_PICKING = "Your task is to choose and return the correct tool(s)"
NO_TOOL_CALLS = '{"tool_calls": []}'


def is_front_end_task(request: str) -> bool:
    """Whether the last user message is one of Open WebUI's task prompts."""
    text = request.lstrip()
    return text.startswith(OPEN_WEBUI_TASK_OPENING) and OPEN_WEBUI_CHAT_HISTORY in text


def picks_front_end_tools(messages: list[dict[str, Any]]) -> bool:
    """Whether the chat asks the model to choose among the front end's own tools."""
    return any(m["role"] == "system" and OPEN_WEBUI_TOOL_PICKING in m["content"] for m in messages)


def model_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chat as the model takes it: system, user and assistant text; a developer message
    is a system one (older servers know no other), tool messages have nothing for it."""
    kept = []
    for message in messages:
        role = "system" if message["role"] == "developer" else message["role"]
        if role in ("system", "user", "assistant") and message["content"]:
            kept.append({"role": role, "content": message["content"]})
    return kept
