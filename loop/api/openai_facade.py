"""The OpenAI-compatible facade: a whole agent run behind a chat completion, so that any OpenAI
client — a chat front end such as Open WebUI or LibreChat, a bot, a load generator — can talk
to the agent as if it were a model.

What it does with each parameter is in facade_params.py; how a run's confirmation is asked and
answered in the conversation in facade_confirm.py; a front end's housekeeping requests in
facade_tasks.py; how a completion goes out in facade_replies.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import Response
from mcp.types import ElicitResult
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    WithJsonSchema,
)

from common.chat import InvalidContent, content_text

from ..model import OpenAIChatModel
from ..runs import (
    ConfirmationAlreadyAnswered,
    RunManager,
    UnknownConfirmation,
    accept_content,
)
from ..settings import LoopSettings
from . import facade_confirm as confirm
from . import facade_params as params
from . import facade_tasks as tasks
from .auth import Authenticated, User, manager_of
from .bodies import UnicodeJSONRoute
from .errors import AUTH_ERRORS, OpenAIError, errors, excerpt, openai_error
from .facade_replies import Completion, FixedReply, Reply, RunReply, TaskReply, streamed, whole
from .forward import HolderUnreachable, forward, holder_of
from .runs import MAX_INPUT_CHARS

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


def _only(allowed: Any) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value != allowed:
            raise ValueError(f"only {allowed!r}")
        return value

    return check


def _doc(name: str) -> str:
    parameter = params.PARAMETERS[name]
    return parameter.accepts + ("" if parameter.why is None else f"; {parameter.why}")


Number = Annotated[float, Field(strict=True)]
Penalty = Annotated[float, Field(strict=True, ge=-2, le=2)]
Share = Annotated[float, Field(strict=True, ge=0, le=1)]
Count = Annotated[int, Field(strict=True, ge=1)]
OnlyOne = Annotated[StrictInt, AfterValidator(_only(1)), WithJsonSchema({"const": 1})]
OnlyZero = Annotated[StrictInt, AfterValidator(_only(0)), WithJsonSchema({"const": 0})]
OnlyFalse = Annotated[StrictBool, AfterValidator(_only(False)), WithJsonSchema({"const": False})]


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]


class ChatRequest(BaseModel):
    """A chat completion request. The parameters chat front ends send are taken (each one's
    description says what happens to it); any other is refused with a 400 naming it."""

    model_config = ConfigDict(extra="forbid")

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: StrictBool = False
    stream_options: dict[str, Any] | None = Field(None, description=_doc("stream_options"))
    n: OnlyOne | None = Field(None, description=_doc("n"))
    user: StrictStr | None = Field(None, description=_doc("user"))
    metadata: dict[str, Any] | None = Field(None, description=_doc("metadata"))
    temperature: Annotated[float, Field(strict=True, ge=0, le=2)] | None = Field(
        None, description=_doc("temperature")
    )
    top_p: Share | None = Field(None, description=_doc("top_p"))
    top_k: StrictInt | None = Field(None, description=_doc("top_k"))
    min_p: Share | None = Field(None, description=_doc("min_p"))
    repetition_penalty: Annotated[float, Field(strict=True, gt=0)] | None = Field(
        None, description=_doc("repetition_penalty")
    )
    presence_penalty: Penalty | None = Field(None, description=_doc("presence_penalty"))
    frequency_penalty: Penalty | None = Field(None, description=_doc("frequency_penalty"))
    seed: StrictInt | None = Field(None, description=_doc("seed"))
    logit_bias: dict[str, Number] | None = Field(None, description=_doc("logit_bias"))
    max_tokens: Count | None = Field(None, description=_doc("max_tokens"))
    max_completion_tokens: Count | None = Field(None, description=_doc("max_completion_tokens"))
    stop: StrictStr | Annotated[list[StrictStr], Field(max_length=4)] | None = Field(
        None, description=_doc("stop") + "; the answer ends before the first stop string"
    )
    logprobs: OnlyFalse | None = Field(None, description=_doc("logprobs"))
    top_logprobs: OnlyZero | None = Field(None, description=_doc("top_logprobs"))
    response_format: TextFormat | None = Field(None, description=_doc("response_format"))
    tools: list[Any] | None = Field(None, description=_doc("tools"))
    functions: list[Any] | None = Field(None, description=_doc("functions"))
    tool_choice: Any = Field(None, description=_doc("tool_choice"))
    function_call: Any = Field(None, description=_doc("function_call"))
    parallel_tool_calls: StrictBool | None = Field(None, description=_doc("parallel_tool_calls"))
    reasoning_effort: StrictStr | None = Field(None, description=_doc("reasoning_effort"))


class BadChat(ValueError):
    """A chat request the facade cannot run; `param` names the offending field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@router.get("/v1/models", responses=errors(413, 431, model=OpenAIError))
async def models(request: Request) -> dict[str, Any]:
    """The agent, and the plain model for a front end's housekeeping (its task model)."""
    settings: LoopSettings = request.app.state.settings
    names = (settings.agent_model_name, settings.task_model_name)
    return {
        "object": "list",
        "data": [{"id": name, "object": "model", "owned_by": "leave-copilot"} for name in names],
    }


@router.post(
    FACADE_PATH,
    responses={
        200: {
            "description": "A chat.completion, or chat.completion.chunk events when streaming.",
            "content": {"application/json": {}, "text/event-stream": {}},
        },
        **errors(400, 404, 409, 413, 431, *AUTH_ERRORS, model=OpenAIError),
    },
)
async def chat_completions(body: ChatRequest, user: Authenticated, request: Request) -> Response:
    """OpenAI-compatible facade. To the agent's model: the last user message is the request,
    the earlier user and assistant messages its history, and the whole agent run is the
    completion — or, when the run needs a person's confirmation, the question, which the
    person's next message in the conversation answers (the conversation is known by an
    `X-Conversation-Id` or `X-OpenWebUI-Chat-Id` header, else by the history). To the task
    model: the messages straight to the model, without tools or a run (a front end's titles,
    tags and follow-up suggestions)."""
    settings: LoopSettings = request.app.state.settings
    if body.model not in (settings.agent_model_name, settings.task_model_name):
        return openai_error(404, f"The model `{excerpt(body.model)}` does not exist.", "model")
    try:
        messages = chat_messages(body.messages)
        conversation = confirm.conversation_id(request.headers)
    except BadChat as error:
        return openai_error(400, str(error), error.param)
    except confirm.BadConversationId as error:
        message = f"{error.header}: a conversation id is visible ASCII, at most 200 characters"
        return openai_error(400, message, error.header)
    include_usage = bool((body.stream_options or {}).get("include_usage"))
    completion = Completion(body.model, stop=body.stop, include_usage=include_usage)
    session = None if conversation is None else confirm.session_of(conversation[1])
    if body.model == settings.task_model_name or _housekeeping(messages):
        reply = _task(request, body, messages, completion, session)
        return streamed(completion, reply) if body.stream else await whole(completion, reply)
    completion.headers = params.warning_headers(params.ignored(body.model_dump(), settings))
    try:
        user_input, history = split_chat(messages)
    except BadChat as error:
        return openai_error(400, str(error), error.param)
    manager = manager_of(request)
    relayed = await _relayed(request, manager, user, history)
    if relayed is not None:
        return relayed
    if conversation is not None and session is not None:
        owner = await manager.store.session_owner(session)
        if owner is not None and owner != user.key:
            message = f"{conversation[0]}: this conversation is another user's; start a new one"
            return openai_error(409, message, conversation[0])
    try:
        reply = await _converse(manager, user, user_input, history, session, body.stream, settings)
    except confirm.StillRunning as error:
        refused = openai_error(error.status, str(error), "messages")
        if error.status == 503:  # another request may reach the loop that holds the run
            refused.headers["Retry-After"] = "1"
        return refused
    return streamed(completion, reply) if body.stream else await whole(completion, reply)


async def _relayed(
    request: Request, manager: RunManager, user: User, history: list[dict[str, Any]]
) -> Response | None:
    """The reply of the loop that holds the run whose question the conversation last showed,
    when that is another live loop: the person's answer (or whatever they said instead) is
    for the run, and the run is there."""
    marker = confirm.marker_of(history)
    if marker is None:
        return None
    holder = await holder_of(request, manager, marker[0], user.key)
    if holder is None:
        return None
    try:
        return await forward(request, holder, manager.instance_id)
    except HolderUnreachable:
        refused = openai_error(
            503,
            "the loop holding this conversation's question did not answer; try again",
            "messages",
        )
        refused.headers["Retry-After"] = "1"
        return refused


def facade_refusal(error: dict[str, Any]) -> tuple[str, str | None]:
    """(message, param) of the 400 for a request's first validation error."""
    if error["type"] == "json_invalid":
        return f"the body is not valid JSON: {error.get('ctx', {}).get('error', '')}", None
    loc = error["loc"][1:]
    if error["type"] == "extra_forbidden":
        param = _param(loc)
        return f"{param}: not supported by this facade", param
    if loc and loc[0] in params.PARAMETERS:  # a union's errors name its members: say it plainly
        return f"{loc[0]}: must be {params.PARAMETERS[str(loc[0])].accepts}", str(loc[0])
    param = _param(loc)
    return f"{param}: {error['msg']}", param


def chat_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """The chat as role and text; raises BadChat naming a content that is not text."""
    texts = []
    for i, message in enumerate(messages):
        try:
            texts.append({"role": message.role, "content": content_text(message.content)})
        except InvalidContent as error:
            raise BadChat(f"messages[{i}].{error}", f"messages[{i}].content") from None
    return texts


def split_chat(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """(the request, its history) from an OpenAI transcript; raises BadChat. The history
    keeps the user and assistant text."""
    last = len(messages) - 1
    if messages[last]["role"] != "user" or not messages[last]["content"]:
        raise BadChat("the last message must be a user message with text", "messages")
    request = messages[last]["content"]
    if len(request) > MAX_INPUT_CHARS:
        raise BadChat(
            f"messages[{last}].content: a request to the agent is at most {MAX_INPUT_CHARS} "
            f"characters (this one has {len(request)})",
            f"messages[{last}].content",
        )
    history = [
        {"role": m["role"], "content": m["content"]}
        for m in messages[:last]
        if m["role"] in ("user", "assistant") and m["content"]
    ]
    return request, history


def _housekeeping(messages: list[dict[str, Any]]) -> bool:
    """A front end's task prompt sent to the agent's own model id."""
    if tasks.picks_front_end_tools(messages):
        return True
    users = [m["content"] for m in messages if m["role"] == "user"]
    return bool(users) and tasks.is_front_end_task(users[-1])


def _task(
    request: Request,
    body: ChatRequest,
    messages: list[dict[str, Any]],
    completion: Completion,
    session: str | None,
) -> Reply:
    """A housekeeping request: answered by the model alone (or, for picking among the front
    end's own tools, with none of them, without asking it)."""
    settings: LoopSettings = request.app.state.settings
    values = body.model_dump()
    notes = params.ignored(values, settings)
    notes.pop("max_tokens", None)  # mapped, below
    notes.pop("max_completion_tokens", None)
    max_tokens, lowered = params.task_max_tokens(values, settings)
    if lowered:
        notes["max_tokens"] = f"{params.TASK_LENGTH} ({settings.task_max_tokens})"
    completion.headers = params.warning_headers(notes)
    if tasks.picks_front_end_tools(messages):
        return FixedReply(tasks.NO_TOOL_CALLS)
    model: OpenAIChatModel = request.app.state.task_model
    model = model.limited(max_tokens)
    if body.stream:
        model = model.streaming()
    return TaskReply(model, tasks.model_messages(messages), session)


async def _converse(
    manager: RunManager,
    user: User,
    request: str,
    history: list[dict[str, Any]],
    session: str | None,
    stream: bool,
    settings: LoopSettings,
) -> Reply:
    """The reply to a person's message: the answer to a question their conversation waits
    on, or a new run. Raises StillRunning for an answer that cannot be taken now."""
    timeout = settings.confirmation_timeout_seconds
    marker = confirm.marker_of(history)
    waiting = None
    if marker is not None:
        waiting = confirm.waiting_by_marker(manager, user.key, *marker)
    elif session is not None:
        waiting = confirm.waiting_in_session(manager, user.key, session)
        if waiting is not None and any(m["role"] == "assistant" for m in history):
            # the transcript the person sees does not show the question (its completion was
            # cut off): they cannot have meant to answer it, whatever they said
            return _ask_again(waiting, timeout)
    if waiting is not None:
        return _answer(manager, user, waiting, request, timeout)
    if marker is not None and confirm.read_answer(request) is not None:
        said = await confirm.settled_text(manager, user.key, *marker, timeout)
        return _ask_again(said, timeout) if isinstance(said, confirm.Waiting) else FixedReply(said)
    # the model is given the history without the markers, which mean nothing to it
    told = [{**m, "content": confirm.without_marker(m["content"])} for m in history]
    run = await manager.start(
        user.token,
        request,
        session_id=session,
        confirm="ask",
        stream=stream,
        history=told,
        events=True,
    )
    return RunReply(run, timeout)


def _answer(
    manager: RunManager, user: User, waiting: confirm.Waiting, request: str, timeout: float
) -> Reply:
    """The person's message to a question that waits: their answer, and the run's reply from
    there; or, when it is no yes or no, the question again."""
    run, pending = waiting.run, waiting.pending
    if run.read_by_facade:
        raise confirm.StillRunning("the previous message is still being answered", 409)
    answer = confirm.read_answer(request)
    if answer is None:
        return _ask_again(waiting, timeout)
    content = accept_content(pending.schema) if answer == "accept" else None
    reply = RunReply(run, timeout)  # this request reads the run from here on
    try:
        manager.answer_confirmation(
            run.id, user.key, pending.id, ElicitResult(action=answer, content=content), user.token
        )
    except (UnknownConfirmation, ConfirmationAlreadyAnswered):
        reply.release()
        raise confirm.StillRunning("this confirmation was already answered", 409) from None
    return reply


def _ask_again(waiting: confirm.Waiting, timeout: float) -> Reply:
    question = confirm.question_text(waiting.run.id, waiting.pending, timeout)
    run = {"id": waiting.run.id, "status": "running", "confirmation_id": waiting.pending.id}
    return FixedReply(confirm.ASK_AGAIN + question, run)


def _param(loc: tuple[Any, ...]) -> str:
    """A pydantic location as a JSON path: ("messages", 0, "role") → messages[0].role."""
    path = ""
    for part in loc:
        name = excerpt(str(part))
        path += f"[{part}]" if isinstance(part, int) else f".{name}" if path else name
    return path or "body"
