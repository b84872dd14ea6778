"""A vLLM tool-parser plugin for models that write their tool calls as JSON text.

Some fine-tunes (and small instruct models) answer a tool turn with JSON objects such as
{"name": "search_leaves", "arguments": {"keyword": "特休"}}: inside a ```json fence or bare,
one per line, several in one fence, or as an array. vLLM's xLAM parser reads an array; this one
gathers every object with a "name" and "arguments" (or "parameters") from the text into that
array first, so the server returns real `tool_calls` and the rest of the text as content.

Serve with (deploy/.env):
    VLLM_TOOL_PARSER_PLUGIN=json_tool_calls.py
    VLLM_TOOL_CALL_PARSER=json_tool_calls
"""

import json
import re

from vllm.tool_parsers.abstract_tool_parser import ToolParserManager
from vllm.tool_parsers.xlam_tool_parser import xLAMToolParser

FENCE = re.compile(r"```[A-Za-z]*[ \t]*\n?(.*?)(?:```|$)", re.DOTALL)


def tool_call_objects(text: str) -> tuple[list[dict], str]:
    """(the tool calls written in `text`, the text without them)."""
    decoder = json.JSONDecoder()
    calls: list[dict] = []
    kept: list[str] = []
    position = 0
    while position < len(text):
        starts = [p for p in (text.find("{", position), text.find("[", position)) if p >= 0]
        if not starts:
            break
        start = min(starts)
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            kept.append(text[position : start + 1])
            position = start + 1
            continue
        found = [v for v in (value if isinstance(value, list) else [value]) if _is_call(v)]
        kept.append(text[position:start] if found else text[position:end])
        calls += [{"name": v["name"], "arguments": _arguments(v)} for v in found]
        position = end
    kept.append(text[position:])
    rest = FENCE.sub(lambda m: m.group(0) if m.group(1).strip() else "", "".join(kept))
    return calls, rest.strip()


def _is_call(value: object) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("name"), str)
        and ("arguments" in value or "parameters" in value)
    )


def _arguments(call: dict) -> object:
    arguments = call.get("arguments", call.get("parameters"))
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return arguments


class JsonToolCallParser(xLAMToolParser):
    def preprocess_model_output(self, model_output: str) -> tuple[str | None, str | None]:
        calls, rest = tool_call_objects(model_output)
        if not calls:
            return super().preprocess_model_output(model_output)
        return rest or None, json.dumps(calls, ensure_ascii=False)


# Eager registration: the plugin file is not an importable module name for lazy loading.
ToolParserManager.register_module(name="json_tool_calls", module=JsonToolCallParser)
