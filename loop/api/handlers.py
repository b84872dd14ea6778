"""How errors are answered: in the shape each route documents (errors.py), with no more of the
request in them than an excerpt, and with the methods a path really serves."""

from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, Match

from .errors import error_content, excerpt, openai_error
from .openai_facade import FACADE_PATH, facade_refusal

# FastAPI's answer to a body it could not read as text (it is not UTF-8, or JSON nested past
# Python's recursion limit), which it raises from the cause.
UNREADABLE_BODY = 400
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
# Messages are ours or pydantic's and short; a few (jsonschema's) quote the value refused.
MESSAGE_CHARS = 300


def install(app: FastAPI) -> None:
    async def invalid_request(request: Request, error: Exception) -> Response:
        assert isinstance(error, RequestValidationError)
        return _invalid(request, error)

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        if error.status_code == UNREADABLE_BODY and error.__cause__ is not None:
            return _invalid(request, _unreadable(error.__cause__))
        if error.status_code == 405:
            return _methods(app.router.routes, request, error)
        return JSONResponse(
            error_content(request.url.path, error.status_code, str(error.detail)),
            status_code=error.status_code,
            headers=error.headers,
        )

    async def internal_error(request: Request, error: Exception) -> Response:
        # Starlette logs the traceback itself; the caller gets the route's shape, no internals.
        return JSONResponse(error_content(request.url.path, 500, "internal error"), status_code=500)

    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, internal_error)


def _invalid(request: Request, error: RequestValidationError) -> Response:
    """FastAPI's 422 everywhere but the facade, which answers as the OpenAI API does: 400.
    Either way only an excerpt of what was refused goes back."""
    if request.url.path == FACADE_PATH:
        message, param = facade_refusal(error.errors()[0])
        return openai_error(400, message, param)
    return JSONResponse(
        {"detail": [_bounded(e) for e in jsonable_encoder(error.errors())]}, status_code=422
    )


def _bounded(error: dict[str, Any]) -> dict[str, Any]:
    bounded = {
        **error,
        "loc": [excerpt(part) for part in error.get("loc", ())],
        "msg": excerpt(error.get("msg", ""), MESSAGE_CHARS),
    }
    if "input" in error:
        bounded["input"] = excerpt(error["input"])
    if "ctx" in error:
        bounded["ctx"] = {key: excerpt(value) for key, value in error["ctx"].items()}
    return bounded


def _unreadable(cause: BaseException) -> RequestValidationError:
    """A body that is not text as the same 422 as any other that is not JSON."""
    if isinstance(cause, UnicodeDecodeError):
        reason = f"the body is not valid UTF-8 (byte {cause.start})"
    elif isinstance(cause, RecursionError):
        reason = "the body is nested too deeply"
    else:
        reason = "the body could not be read"
    return RequestValidationError(
        [
            {
                "type": "json_invalid",
                "loc": ("body", 0),
                "msg": "JSON decode error",
                "input": {},
                "ctx": {"error": reason},
            }
        ]
    )


def _methods(routes: list[BaseRoute], request: Request, error: HTTPException) -> Response:
    """OPTIONS, or a method the path does not serve: every method its routes serve (Starlette
    names only the first route's), found by asking each route as the router does."""
    path = request.url.path
    served = {"OPTIONS"}
    for method in METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] is Match.FULL for route in routes):
            served.add(method)
    headers = {"Allow": ", ".join(sorted(served))}
    if request.method == "OPTIONS":
        return Response(status_code=204, headers=headers)
    content = error_content(path, 405, str(error.detail))
    return JSONResponse(content, status_code=405, headers=headers)
