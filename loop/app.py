"""The loop's HTTP API (FastAPI: OpenAPI at /docs)."""

# No `from __future__ import annotations`: FastAPI resolves the route signatures at runtime,
# and `Authenticated` is local to create_app.

import asyncio
import json
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import httpx2
from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from mcp.types import ElicitResult
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from common.chat import InvalidContent, content_text
from common.limits import HeaderSizeLimit

from .auth_guard import FailureLimiter, RejectedTokens
from .engine import LoopConfig
from .mcp_pool import McpPool, McpUnauthorized, McpUnavailable, token_key
from .metrics import LoopMetrics
from .model import OpenAIChatModel
from .runs import (
    ConfirmationAlreadyAnswered,
    RunIdInUse,
    RunManager,
    UnknownConfirmation,
    accept_content,
)
from .schemas import (
    AUTH_ERRORS,
    ChatMessage,
    ChatRequest,
    ConfirmationAnswer,
    ConfirmationAnswered,
    OpenAIError,
    Readiness,
    RunList,
    RunRecordView,
    RunRequest,
    RunResponse,
    errors,
)
from .settings import LoopSettings
from .store import RunStore

logger = logging.getLogger(__name__)
# RFC 6750 b64token: what a bearer token may contain; anything else is refused before it is
# put into a header of our own (a non-ASCII one cannot even be encoded there).
BEARER_TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")
FACADE_PATH = "/v1/chat/completions"


class User(BaseModel):
    token: str
    key: str


def create_app(settings: LoopSettings | None = None, store: RunStore | None = None) -> FastAPI:
    """The loop's app; `store` if it is already open (the app disposes of it at shutdown)."""
    settings = settings or LoopSettings()
    opened_store = store
    metrics = LoopMetrics()
    rejected = RejectedTokens(settings.rejected_token_cache_seconds)
    limiter = FailureLimiter(settings.auth_failure_limit, settings.auth_failure_window_seconds)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = opened_store or RunStore(settings.store_url)
        pool = McpPool(
            settings.mcp_url,
            connect_timeout=settings.mcp_connect_timeout_seconds,
            read_timeout=settings.tool_timeout_seconds + settings.confirmation_timeout_seconds,
        )
        model = OpenAIChatModel(
            base_url=settings.model_base_url,
            model=settings.model_name,
            api_key=settings.model_api_key.get_secret_value(),
            timeout=settings.model_timeout_seconds,
            max_retries=settings.model_max_retries,
            backoff_seconds=settings.model_retry_backoff_seconds,
            temperature=settings.temperature,
            max_tokens=settings.max_tokens,
            on_retry=lambda reason: metrics.retries.labels(reason).inc(),
        )
        config = LoopConfig(
            system_prompt=settings.system_prompt,
            max_turns=settings.max_turns,
            stop_tools=frozenset(settings.stop_tools),
            tool_timeout=settings.tool_timeout_seconds,
            confirmation_timeout=settings.confirmation_timeout_seconds,
            tool_concurrency=settings.tool_concurrency,
            context_tokens=settings.model_context_tokens,
            # The model's answer needs room too: max_tokens when set, else a typical answer.
            answer_reserve_tokens=settings.max_tokens or 512,
            tool_result_max_tokens=settings.tool_result_max_tokens,
        )
        manager = RunManager(
            pool=pool,
            model=model,
            streaming_model=model.streaming(),
            config=config,
            store=store,
            metrics=metrics,
            max_concurrent_runs=settings.max_concurrent_runs,
            session_max_messages=settings.session_max_messages,
            trace_model_name=settings.model_name if settings.trace_log else None,
        )
        manager.mark_interrupted()
        app.state.manager = manager
        app.state.probe = httpx2.AsyncClient(timeout=3.0)
        try:
            yield
        finally:
            for run in list(manager.active.values()):
                if run.task:
                    run.task.cancel()
            await pool.close()
            await model.close()
            await app.state.probe.aclose()
            store.dispose()

    app = FastAPI(
        title="leave-copilot agent loop",
        version="0.1.0",
        description="A thin native agent loop between a tool-calling model and the leave MCP "
        "server: runs, streaming, confirmations over HTTP, sessions, step records.",
        lifespan=lifespan,
        responses=errors(431),  # every route: see HeaderSizeLimit
    )

    # Outermost: an oversized header is refused before anything reads or forwards it.
    app.add_middleware(HeaderSizeLimit, max_bytes=settings.max_header_bytes)

    def manager_of(request: Request) -> RunManager:
        return request.app.state.manager

    async def current_user(
        request: Request, authorization: Annotated[str | None, Header()] = None
    ) -> User:
        if not authorization or not authorization.lower().startswith("bearer "):
            raise HTTPException(401, "missing bearer token", {"WWW-Authenticate": "Bearer"})
        token = authorization[7:].strip()
        manager = manager_of(request)
        if manager.pool.has_open(token):  # accepted before: costs nothing to let through
            return User(token=token, key=token_key(token))
        client = request.client.host if request.client else "unknown"
        wait = limiter.retry_after(client)
        if wait:
            raise HTTPException(
                429, "too many failed authentications; try again later", {"Retry-After": str(wait)}
            )

        def refused(detail: str) -> HTTPException:
            limiter.failed(client)
            return HTTPException(401, detail, {"WWW-Authenticate": "Bearer"})

        if not BEARER_TOKEN.fullmatch(token):
            raise refused("malformed bearer token")
        key = token_key(token)
        if key in rejected:
            raise refused("the leave system does not accept this token")
        try:
            await manager.authenticate(token)
        except McpUnauthorized:
            rejected.add(key)
            raise refused("the leave system does not accept this token") from None
        except McpUnavailable as error:  # the detail is for the operator, not the caller
            logger.warning("authentication: %s", error)
            raise HTTPException(503, "the leave MCP server is unavailable") from None
        return User(token=token, key=key)

    Authenticated = Annotated[User, Depends(current_user)]

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/readyz", tags=["health"], response_model=Readiness, responses={503: {"model": Readiness}}
    )
    async def readyz(request: Request) -> JSONResponse:
        probe: httpx2.AsyncClient = request.app.state.probe

        async def model_ok() -> str:
            try:
                response = await probe.get(f"{settings.model_base_url}/models")
                return "ok" if response.status_code == 200 else f"HTTP {response.status_code}"
            except httpx2.HTTPError as error:
                return type(error).__name__

        async def mcp_ok() -> str:
            try:  # any answer below 500 (401, 405, 406 …) means the server is there
                response = await probe.get(settings.mcp_url)
                return "ok" if response.status_code < 500 else f"HTTP {response.status_code}"
            except httpx2.HTTPError as error:
                return type(error).__name__

        model, mcp = await asyncio.gather(model_ok(), mcp_ok())
        ready = model == mcp == "ok"
        return JSONResponse(
            {"status": "ready" if ready else "unavailable", "model": model, "mcp": mcp},
            status_code=200 if ready else 503,
        )

    @app.get(
        "/metrics",
        tags=["health"],
        response_class=PlainTextResponse,
        responses={200: {"description": "Prometheus text exposition format."}},
    )
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post(
        "/v1/runs",
        tags=["runs"],
        response_model=RunResponse,
        responses={200: {"content": {"text/event-stream": {}}}, **errors(409, *AUTH_ERRORS)},
    )
    async def create_run(body: RunRequest, user: Authenticated, request: Request) -> Response:
        """Run the agent on one request. With `stream: true` the answer is a stream of
        Server-Sent Events: run.started, model.started/finished, tool.started/finished,
        confirmation.requested/resolved, answer.delta, detection, run.finished.
        With `run_id`, a retry after a lost connection returns the same run."""
        manager = manager_of(request)
        confirm = body.confirm or ("ask" if body.stream else "decline")
        try:
            run = await manager.start(
                user.token,
                body.input,
                session_id=body.session_id,
                confirm=confirm,
                stream=body.stream,
                run_id=body.run_id,
            )
        except RunIdInUse:
            final = await _earlier_run(manager, str(body.run_id), user.key, body.stream)
            if not body.stream:
                return JSONResponse(final)
            return StreamingResponse(_sse_once(final), media_type="text/event-stream")
        if not body.stream:
            return JSONResponse(await asyncio.shield(run.task))
        return StreamingResponse(_sse(manager, run), media_type="text/event-stream")

    @app.get("/v1/runs", tags=["runs"], response_model=RunList, responses=errors(*AUTH_ERRORS))
    async def list_runs(
        user: Authenticated,
        request: Request,
        limit: Annotated[int, Query(ge=1, le=100, description="How many, newest first.")] = 20,
    ) -> dict[str, Any]:
        """The caller's recent runs (running ones included): how a client that lost its
        connection finds the run it started."""
        return {"runs": await manager_of(request).recent(user.key, limit)}

    @app.get(
        "/v1/runs/{run_id}",
        tags=["runs"],
        response_model=RunRecordView,
        responses=errors(404, *AUTH_ERRORS),
    )
    async def get_run(run_id: str, user: Authenticated, request: Request) -> dict[str, Any]:
        record = await manager_of(request).record(run_id, user.key)
        if record is None:
            raise HTTPException(404, "no such run")
        return record

    @app.post(
        "/v1/runs/{run_id}/cancel",
        tags=["runs"],
        response_model=RunResponse,
        responses=errors(404, *AUTH_ERRORS),
    )
    async def cancel_run(run_id: str, user: Authenticated, request: Request) -> dict[str, Any]:
        manager = manager_of(request)
        run = manager.active.get(run_id)
        if run is None or run.user_key != user.key or not manager.cancel(run_id, user.key):
            raise HTTPException(404, "no such running run")
        return await asyncio.shield(run.task)

    @app.post(
        "/v1/runs/{run_id}/confirmations/{confirmation_id}",
        tags=["runs"],
        response_model=ConfirmationAnswered,
        responses=errors(404, 409, *AUTH_ERRORS),
    )
    async def answer_confirmation(
        run_id: str,
        confirmation_id: str,
        body: ConfirmationAnswer,
        user: Authenticated,
        request: Request,
    ) -> dict[str, str]:
        manager = manager_of(request)
        run = manager.active.get(run_id)
        pending = run.confirmations.get(confirmation_id) if run else None
        content = body.content
        if body.action == "accept" and content is None and pending is not None:
            content = accept_content(pending.schema)
        answer = ElicitResult(
            action=body.action, content=content if body.action == "accept" else None
        )
        try:
            manager.answer_confirmation(run_id, user.key, confirmation_id, answer)
        except UnknownConfirmation:
            raise HTTPException(404, "no such pending confirmation") from None
        except ConfirmationAlreadyAnswered:
            raise HTTPException(409, "this confirmation was already answered") from None
        return {"status": "answered", "action": body.action}

    @app.get("/v1/models", tags=["openai"])
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": settings.agent_model_name, "object": "model", "owned_by": "leave-copilot"}
            ],
        }

    @app.post(
        FACADE_PATH,
        tags=["openai"],
        responses={
            200: {
                "description": "A chat.completion, or chat.completion.chunk events when streaming.",
                "content": {"application/json": {}, "text/event-stream": {}},
            },
            **errors(400, 404, model=OpenAIError),
            **errors(*AUTH_ERRORS),
        },
    )
    async def chat_completions(
        body: ChatRequest, user: Authenticated, request: Request
    ) -> Response:
        """OpenAI-compatible facade: the whole agent run behind one chat completion. The last
        user message is the request; earlier user/assistant messages are its history.
        Confirmations are declined (a non-interactive caller never confirms by accident)."""
        if body.model != settings.agent_model_name:
            return _openai_error(
                404, f"The model `{body.model}` does not exist.", "model", "NotFoundError"
            )
        try:
            user_input, history = _split_chat(body.messages)
        except BadChat as error:
            return _openai_error(400, str(error), error.param)
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
            final = await asyncio.shield(run.task)
            return JSONResponse(_completion(completion_id, settings.agent_model_name, final))
        include_usage = bool((body.stream_options or {}).get("include_usage"))
        return StreamingResponse(
            _chat_stream(manager, run, completion_id, settings.agent_model_name, include_usage),
            media_type="text/event-stream",
        )

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> Response:
        if request.url.path != FACADE_PATH:
            return await request_validation_exception_handler(request, error)
        # OpenAI clients expect a 400 in the OpenAI error shape, not FastAPI's 422.
        first = error.errors()[0]
        param = _param(first["loc"][1:])
        return _openai_error(400, f"{param}: {first['msg']}", param)

    document = app.openapi

    def openapi() -> dict[str, Any]:
        """The generated document, minus the 422 FastAPI lists for the facade (which answers
        invalid requests with 400, as the OpenAI API does)."""
        schema = document()
        schema["paths"][FACADE_PATH]["post"]["responses"].pop("422", None)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


async def _earlier_run(
    manager: RunManager, run_id: str, user_key: str, stream: bool
) -> dict[str, Any]:
    """The final result of the run a retry names; 409 when it is not the caller's to have."""
    active = manager.active.get(run_id)
    if active is not None and active.user_key == user_key and active.task is not None:
        if stream:  # its events already go to the first request; two readers would split them
            raise HTTPException(409, f"run {run_id} is running; follow it at /v1/runs/{run_id}")
        return await asyncio.shield(active.task)
    record = await manager.record(run_id, user_key)
    if record is None or record["status"] == "running":
        raise HTTPException(409, f"run_id {run_id} is taken")
    return {
        key: record[key]
        for key in ("id", "status", "answer", "steps", "usage", "turns", "session_id")
    } | {key: record[key] for key in ("result", "reason") if record.get(key) is not None}


async def _sse_once(final: dict[str, Any]) -> AsyncIterator[bytes]:
    yield f"event: run.finished\ndata: {json.dumps(final, ensure_ascii=False)}\n\n".encode()


def _param(loc: tuple[Any, ...]) -> str:
    """A pydantic location as a JSON path: ("messages", 0, "role") → messages[0].role."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path or "body"


async def _sse(manager: RunManager, run: Any) -> AsyncIterator[bytes]:
    async for kind, data in manager.events(run):
        payload = json.dumps(data, ensure_ascii=False, default=str)
        yield f"event: {kind}\ndata: {payload}\n\n".encode()


class BadChat(ValueError):
    """A chat request the facade cannot run; `param` names the offending field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def _split_chat(messages: list[ChatMessage]) -> tuple[str, list[dict[str, Any]]]:
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


def _openai_error(
    status: int, message: str, param: str | None, error_type: str = "BadRequestError"
) -> JSONResponse:
    """An error in the OpenAI API's shape, which OpenAI clients read."""
    body = {"error": {"message": message, "type": error_type, "param": param, "code": status}}
    return JSONResponse(body, status_code=status)


def _completion(completion_id: str, model: str, final: dict[str, Any]) -> dict[str, Any]:
    usage = final["usage"]
    answer = final["answer"] or _status_text(final)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": answer},
                "finish_reason": "stop" if final["status"] == "completed" else "length",
            }
        ],
        "usage": {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]},
        "run": {"id": final["id"], "status": final["status"], "turns": final["turns"]},
    }


def _status_text(final: dict[str, Any]) -> str:
    return f"（執行未完成：{final['status']}，{final.get('reason') or ''}）"


async def _chat_stream(
    manager: RunManager, run: Any, completion_id: str, model: str, include_usage: bool
) -> AsyncIterator[bytes]:
    head = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n".encode()

    yield chunk({"role": "assistant", "content": ""})
    # Answer text is only known to be the answer once its turn ends without tool calls:
    # buffer each model turn's text and release it when that turn is the last.
    buffered: list[str] = []
    async for kind, data in manager.events(run):
        if kind == "model.started":
            buffered = []
        elif kind == "answer.delta":
            buffered.append(data["text"])
        elif kind == "model.finished" and not data.get("step", {}).get("result", {}).get(
            "tool_calls"
        ):
            for text in buffered:
                yield chunk({"content": text})
            buffered = []
        elif kind == "run.finished":
            if data["status"] != "completed" or not data["answer"]:
                yield chunk({"content": data["answer"] or _status_text(data)})
            yield chunk({}, "stop" if data["status"] == "completed" else "length")
            if include_usage:
                usage = data["usage"]
                total = usage["prompt_tokens"] + usage["completion_tokens"]
                body = {**head, "choices": [], "usage": {**usage, "total_tokens": total}}
                yield f"data: {json.dumps(body)}\n\n".encode()
    yield b"data: [DONE]\n\n"
