"""The OpenAI-compatible facade: a whole agent run behind one chat completion, so any OpenAI
client (or a load generator) can call the agent as if it were a model."""

import secrets
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal, assert_never

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, WithJsonSchema

from common import sse
from common.chat import InvalidContent, content_text
from common.runs_protocol import (
    AnswerDelta,
    ConfirmationRequested,
    ConfirmationResolved,
    Detection,
    ModelFinished,
    ModelStarted,
    Run,
    RunFinished,
    RunStarted,
    RunStatus,
    ToolFinished,
    ToolStarted,
)

from ..runs import ActiveRun, RunManager, RunNotRecorded
from ..settings import LoopSettings
from .auth import Authenticated, manager_of
from .bodies import UnicodeJSONRoute
from .errors import AUTH_ERRORS, OpenAIError, errors, excerpt, openai_error

router = APIRouter(tags=["openai"], route_class=UnicodeJSONRoute)
FACADE_PATH = "/v1/chat/completions"

# What common.chat.content_text accepts; checked in the route, where the message can name
# the offending part (pydantic's union errors could not).
CONTENT_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "string"},
        {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"type": {"type": "string"}, "text": {"type": "string"}},
                "required": ["type"],
                "if": {"properties": {"type": {"const": "text"}}},
                "then": {"required": ["text"]},
            },
        },
        {"type": "null"},
    ]
}


class ChatMessage(BaseModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Annotated[Any, WithJsonSchema(CONTENT_SCHEMA)] = None


class ChatRequest(BaseModel):
    """What the facade does with a chat; any other parameter is refused with a 400 naming it,
    rather than ignored (a caller would take its answer for one the parameter shaped)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: StrictBool = False
    stream_options: dict[str, Any] | None = None
    n: Literal[1] = Field(1, description="One run gives one answer.")
    user: str | None = Field(None, description="Accepted; the bearer token says who calls.")


# Why the facade does not take these OpenAI parameters (others are simply not supported).
OWN_TOOLS = "the agent calls the leave MCP server's tools; a request cannot bring its own"
OPERATOR_SETTINGS = (
    "the agent's model calls use the loop's own settings (LOOP_TEMPERATURE, LOOP_MAX_TOKENS)"
)
UNSUPPORTED = {
    "tools": OWN_TOOLS,
    "tool_choice": OWN_TOOLS,
    "parallel_tool_calls": OWN_TOOLS,
    "functions": OWN_TOOLS,
    "function_call": OWN_TOOLS,
    **dict.fromkeys(
        (
            "temperature",
            "top_p",
            "max_tokens",
            "max_completion_tokens",
            "seed",
            "stop",
            "presence_penalty",
            "frequency_penalty",
            "logit_bias",
        ),
        OPERATOR_SETTINGS,
    ),
}


class BadChat(ValueError):
    """A chat request the facade cannot run; `param` names the offending field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@router.get("/v1/models", responses=errors(413, 431, model=OpenAIError))
async def models(request: Request) -> dict[str, Any]:
    settings: LoopSettings = request.app.state.settings
    return {
        "object": "list",
        "data": [{"id": settings.agent_model_name, "object": "model", "owned_by": "leave-copilot"}],
    }


@router.post(
    FACADE_PATH,
    responses={
        200: {
            "description": "A chat.completion, or chat.completion.chunk events when streaming.",
            "content": {"application/json": {}, "text/event-stream": {}},
        },
        **errors(400, 404, 413, 431, *AUTH_ERRORS, model=OpenAIError),
    },
)
async def chat_completions(body: ChatRequest, user: Authenticated, request: Request) -> Response:
    """OpenAI-compatible facade: the whole agent run behind one chat completion. The last
    user message is the request; earlier user/assistant messages are its history.
    Confirmations are declined (a non-interactive caller never confirms by accident)."""
    settings: LoopSettings = request.app.state.settings
    if body.model != settings.agent_model_name:
        return openai_error(404, f"The model `{excerpt(body.model)}` does not exist.", "model")
    try:
        user_input, history = split_chat(body.messages)
    except BadChat as error:
        return openai_error(400, str(error), error.param)
    manager = manager_of(request)
    run = await manager.start(
        user.token,
        user_input,
        session_id=None,
        confirm="decline",
        stream=body.stream,
        history=history,
    )
    completion_id = f"chatcmpl-{secrets.token_hex(8)}"
    if not body.stream:
        try:
            final = await run.outcome()
        except RunNotRecorded:
            return openai_error(503, RunNotRecorded.message, None)
        return JSONResponse(_completion(completion_id, settings.agent_model_name, final))
    include_usage = bool((body.stream_options or {}).get("include_usage"))
    return StreamingResponse(
        _chat_stream(manager, run, completion_id, settings.agent_model_name, include_usage),
        media_type="text/event-stream",
    )


def facade_refusal(error: dict[str, Any]) -> tuple[str, str | None]:
    """(message, param) of the 400 for a request's first validation error."""
    if error["type"] == "json_invalid":
        return f"the body is not valid JSON: {error.get('ctx', {}).get('error', '')}", None
    param = _param(error["loc"][1:])
    if param == "n":
        return "n: only n=1 is supported: one run gives one choice", param
    if error["type"] == "extra_forbidden":
        reason = UNSUPPORTED.get(param)
        return f"{param}: not supported by this facade" + (f" ({reason})" if reason else ""), param
    return f"{param}: {error['msg']}", param


def split_chat(messages: list[ChatMessage]) -> tuple[str, list[dict[str, Any]]]:
    """(the request, its history) from an OpenAI transcript; raises BadChat."""
    texts = []
    for i, message in enumerate(messages):
        try:
            text = content_text(message.content)
        except InvalidContent as error:
            raise BadChat(f"messages[{i}].{error}", f"messages[{i}].content") from None
        if message.role in ("user", "assistant") and text:
            texts.append({"role": message.role, "content": text})
    if not texts or texts[-1]["role"] != "user" or messages[-1].role != "user":
        raise BadChat("the last message must be a user message with text", "messages")
    return texts[-1]["content"], texts[:-1]


def _param(loc: tuple[Any, ...]) -> str:
    """A pydantic location as a JSON path: ("messages", 0, "role") → messages[0].role."""
    path = ""
    for part in loc:
        name = excerpt(str(part))
        path += f"[{part}]" if isinstance(part, int) else f".{name}" if path else name
    return path or "body"


def _completion(completion_id: str, model: str, final: Run) -> dict[str, Any]:
    usage = _usage(final)
    answer = final.answer or _status_text(final)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": answer},
                "finish_reason": _finish_reason(final),
            }
        ],
        "usage": usage,
        "run": {"id": final.id, "status": final.status, "turns": final.turns},
    }


def _finish_reason(final: Run) -> str:
    return "stop" if final.status == RunStatus.COMPLETED else "length"


def _usage(final: Run) -> dict[str, int]:
    """The run's token counts in OpenAI's shape."""
    prompt = final.usage.prompt_tokens if final.usage else 0
    completion = final.usage.completion_tokens if final.usage else 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _status_text(final: Run) -> str:
    return f"（執行未完成：{final.status}，{final.reason or ''}）"


async def _chat_stream(
    manager: RunManager, run: ActiveRun, completion_id: str, model: str, include_usage: bool
) -> AsyncIterator[bytes]:
    head = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return sse.frame(body)

    yield chunk({"role": "assistant", "content": ""})
    # Answer text is only known to be the answer once its turn ends without tool calls:
    # buffer each model turn's text and release it when that turn is the last.
    buffered: list[str] = []
    async for event in manager.events(run):
        match event:
            case RunFinished():
                if event.status != RunStatus.COMPLETED or not event.answer:
                    yield chunk({"content": event.answer or _status_text(event)})
                yield chunk({}, _finish_reason(event))
                if include_usage:
                    yield sse.frame({**head, "choices": [], "usage": _usage(event)})
            case ModelStarted():
                buffered = []
            case AnswerDelta():
                buffered.append(event.text)
            case ModelFinished() if event.step is None or not (event.step.result or {}).get(
                "tool_calls"
            ):
                for text in buffered:
                    yield chunk({"content": text})
                buffered = []
            case (
                ModelFinished()
                | RunStarted()
                | ToolStarted()
                | ToolFinished()
                | Detection()
                | ConfirmationRequested()
                | ConfirmationResolved()
            ):
                pass  # the facade shows the answer only
            case _:
                assert_never(event)
    yield sse.DONE_FRAME
