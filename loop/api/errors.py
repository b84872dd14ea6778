"""Error bodies: `{"detail": …}` for the loop's own API, the OpenAI shape for the facade."""

from typing import Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel


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


def errors(*statuses: int, model: type[BaseModel] = ErrorDetail) -> dict[int | str, Any]:
    """OpenAPI `responses` entries for these error statuses."""
    return {status: {"model": model, "description": ERROR_MEANINGS[status]} for status in statuses}


def openai_error(
    status: int, message: str, param: str | None, error_type: str = "BadRequestError"
) -> JSONResponse:
    """An error in the OpenAI API's shape, which OpenAI clients read."""
    body = OpenAIError(
        error=OpenAIErrorBody(message=message, type=error_type, param=param, code=status)
    )
    return JSONResponse(body.model_dump(), status_code=status)
