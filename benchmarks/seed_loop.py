"""The seed article's loop as it was: the baseline the service is measured against.

A new MCP connection, initialize and list_tools for every run, then the bare loop. Kept to
compare against (benchmarks/loop_overhead.py) and to drive the simulator's scenario tests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from common.contract import SYSTEM_PROMPT, TOOL_ERROR_PREFIX
from loop.engine import MAX_TURNS_ANSWER


@dataclass
class SeedRun:
    answer: str
    turns: int
    steps: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)  # tool, args, text


async def seed_loop(
    mcp_url: str,
    token: str,
    model: openai.AsyncOpenAI,
    request: str,
    *,
    model_name: str = "leave-copilot",
    elicitation_callback: Any = None,
    max_turns: int = 8,
) -> SeedRun:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(
            streamable_http_client(mcp_url, http_client=http),
            elicitation_callback=elicitation_callback,
        ) as session,
    ):
        tools: list[Any] = [  # OpenAI tool params, as plain dicts
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description or "",
                    "parameters": t.input_schema,
                },
            }
            for t in (await session.list_tools()).tools
        ]
        messages: list[Any] = [  # OpenAI message params, as plain dicts
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": request},
        ]
        run = SeedRun("", 0)
        for turn in range(1, max_turns + 1):
            run.turns = turn
            response = await model.chat.completions.create(
                model=model_name, messages=messages, tools=tools, temperature=0
            )
            message = response.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                run.answer = message.content or ""
                return run
            for call in message.tool_calls:
                if call.type != "function":  # custom (free-text) tools: never offered here
                    continue
                arguments = json.loads(call.function.arguments)
                result = await session.call_tool(call.function.name, arguments)
                text = "".join(getattr(c, "text", "") for c in result.content)
                if result.is_error:
                    text = f"{TOOL_ERROR_PREFIX} {text}"
                run.steps.append((call.function.name, arguments, text))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
        run.answer = MAX_TURNS_ANSWER
        return run
