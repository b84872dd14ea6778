"""Error bodies: `{"detail": …}` for the loop's own API, the OpenAI shape for the facade."""

import json
from typing import Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel

from common.unicode import printable

# The OpenAI-compatible surface: every error it answers is in the OpenAI shape, which OpenAI
# clients read (they show only the status for any other body).
OPENAI_PATHS = frozenset({"/v1/chat/completions", "/v1/models"})
# How much of a refused value an error body repeats: enough to recognise it, never the value
# itself (a body may be up to LOOP_MAX_BODY_BYTES).
EXCERPT_CHARS = 100


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


ERROR_MEANINGS = {
    400: "The chat is malformed, not JSON, or asks for what the facade does not support (the "
    "message names the field); on any route: a forwarded identity that names no one or two "
    "people (the message names the header).",
    401: "Missing, malformed or refused bearer token.",
    403: "The leave system took the bearer token, but not for the person the request forwards "
    "(a front end's credential forwarding no one, or someone it cannot act for; a person's own "
    "token forwarding anyone): the message says which (docs/identity.md).",
    404: "No such run, confirmation or model (for the caller).",
    409: "The confirmation was already answered, or the run_id is taken (by another user, or "
    "by a run still streaming to another request); on the facade: the conversation id is "
    "another user's, or the conversation's previous message is still being answered.",
    413: "Request body larger than LOOP_MAX_BODY_BYTES.",
    429: "Too many failed authentications from this address; see Retry-After.",
    431: "Request header fields too large.",
    503: "The leave MCP server is unavailable, or the run store could not record the run (it "
    "did not run); the loop replica holding the run did not take the request relayed to it "
    "(see Retry-After); on the facade also: the model could not answer a housekeeping request, "
    "or the confirmation answered waits on another loop replica that others cannot reach "
    "(LOOP_PEER_URL unset).",
}
AUTH_ERRORS = (400, 401, 403, 429, 503)
# The OpenAI clients' names for these statuses (as vLLM answers them), else the status's own.
OPENAI_ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    409: "ConflictError",
    413: "RequestTooLargeError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
    431: "RequestHeaderFieldsTooLargeError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


def errors(*statuses: int, model: type[BaseModel] = ErrorDetail) -> dict[int | str, Any]:
    """OpenAPI `responses` entries for these error statuses."""
    return {status: {"model": model, "description": ERROR_MEANINGS[status]} for status in statuses}


def openai_error(status: int, message: str, param: str | None) -> JSONResponse:
    """An error in the OpenAI API's shape, which OpenAI clients read."""
    return JSONResponse(openai_error_content(status, message, param), status_code=status)


def openai_error_content(status: int, message: str, param: str | None) -> dict[str, Any]:
    default = "InternalServerError" if status >= 500 else "BadRequestError"
    error_type = OPENAI_ERROR_TYPES.get(status, default)
    body = OpenAIError(
        error=OpenAIErrorBody(message=message, type=error_type, param=param, code=status)
    )
    return body.model_dump()


def error_content(path: str, status: int, message: str) -> dict[str, Any]:
    """The body of an error the route at `path` answers: the facade's shape or ours."""
    if path in OPENAI_PATHS:
        return openai_error_content(status, message, None)
    return {"detail": message}


def error_body(path: str, status: int, message: str) -> bytes:
    """`error_content` as the bytes of a JSON response (for the ASGI guards in common.limits)."""
    return json.dumps(error_content(path, status, message)).encode()


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> Any:
    """`value` if short; else the start of its text (a string's own, or its JSON) and how long
    the whole was, so an error body stays small whatever it refuses."""
    if value is None or isinstance(value, bool | int | float):
        return value
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= limit:
        return printable(text) if isinstance(value, str) else value
    return f"{printable(text[:limit])}… ({len(text)} characters)"
