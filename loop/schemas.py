"""The shapes of the loop's HTTP API: what /openapi.json promises and the server holds to."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StrictBool, WithJsonSchema

from .engine import Step

SESSION_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$"
RUN_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,40}$"

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


class RunRequest(BaseModel):
    input: str = Field(min_length=1, max_length=4000, description="The user's request.")
    session_id: str | None = Field(
        None, pattern=SESSION_ID_PATTERN, description="Continue this conversation."
    )
    stream: StrictBool = Field(False, description="Server-Sent Events as the run happens.")
    confirm: Literal["ask", "accept", "decline"] | None = Field(
        None,
        description="How confirmations are answered: ask the client (SSE event), or answer every "
        "one automatically. Default: ask when streaming, decline otherwise.",
    )
    run_id: str | None = Field(
        None,
        pattern=RUN_ID_PATTERN,
        description="Your own id for this run (e.g. a UUID), so you know it before any answer "
        "arrives: GET /v1/runs/{run_id} finds it, and POSTing the same run_id again returns "
        "that run (waiting for it to finish) instead of starting another.",
    )


class ConfirmationAnswer(BaseModel):
    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None


class ConfirmationAnswered(BaseModel):
    status: Literal["answered"]
    action: Literal["accept", "decline", "cancel"]


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int


RunStatus = Literal["completed", "max_turns", "failed", "cancelled"]


class RunResponse(BaseModel):
    id: str
    status: RunStatus
    answer: str
    result: Any = None
    reason: str | None = None
    steps: list[Step]
    usage: Usage
    turns: int
    session_id: str


class RunRecordView(BaseModel):
    """A run as stored: while it runs only id, status and session_id are known."""

    id: str
    status: Literal["running", "completed", "max_turns", "failed", "cancelled"]
    session_id: str
    input: str | None = None
    answer: str | None = None
    result: Any = None
    reason: str | None = None
    steps: list[Step] | None = None
    usage: Usage | None = None
    turns: int | None = None
    created_at: str | None = None
    finished_at: str | None = None


class RunSummary(BaseModel):
    id: str
    status: Literal["running", "completed", "max_turns", "failed", "cancelled"]
    session_id: str
    input: str
    reason: str | None = None
    created_at: str | None = None
    finished_at: str | None = None


class RunList(BaseModel):
    runs: list[RunSummary] = Field(description="The caller's runs, newest first.")


class ChatMessage(BaseModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Annotated[Any, WithJsonSchema(CONTENT_SCHEMA)] = None


class ChatRequest(BaseModel):
    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: StrictBool = False
    stream_options: dict[str, Any] | None = None


class Readiness(BaseModel):
    status: Literal["ready", "unavailable"]
    model: str = Field(description='"ok", or why the model endpoint is not')
    mcp: str = Field(description='"ok", or why the MCP server is not')


class ErrorDetail(BaseModel):
    detail: str


class OpenAIErrorBody(BaseModel):
    message: str
    type: str
    param: str | None
    code: int


class OpenAIError(BaseModel):
    """Errors of the OpenAI-compatible facade, in the OpenAI API's shape."""

    error: OpenAIErrorBody


def errors(*statuses: int, model: type[BaseModel] = ErrorDetail) -> dict[int | str, Any]:
    """OpenAPI `responses` entries for these error statuses."""
    return {status: {"model": model, "description": ERROR_MEANINGS[status]} for status in statuses}


ERROR_MEANINGS = {
    400: "The chat is malformed (the message names the field).",
    401: "Missing, malformed or refused bearer token.",
    404: "No such run, confirmation or model (for the caller).",
    409: "The confirmation was already answered, or the run_id is taken (by another user, or "
    "by a run still streaming to another request).",
    429: "Too many failed authentications from this address; see Retry-After.",
    431: "Request header fields too large.",
    503: "The leave MCP server is unavailable.",
}
AUTH_ERRORS = (401, 429, 503)
