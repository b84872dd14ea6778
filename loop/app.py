"""The loop's HTTP API (FastAPI: OpenAPI at /docs): the services it owns, its routes by concern."""

import asyncio
import datetime as dt
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx2
from fastapi import FastAPI
from fastapi.telemetry import TelemetryConfig

from common.limits import BodySizeLimit, HeaderSizeLimit

from .api import chat_page, docs, handlers, health, openai_facade, runs
from .api.auth import AuthGuard
from .api.errors import error_body, errors
from .api.forward import peer_client
from .auth_guard import FailureLimiter, RejectedTokens
from .engine import LoopConfig
from .mcp_pool import McpPool
from .metrics import LoopMetrics
from .model import OpenAIChatModel
from .runs import RunManager
from .settings import LoopSettings
from .store import RunStore

logger = logging.getLogger(__name__)
# How long shutdown waits for cancelled runs to record themselves before it closes the MCP
# connections and the store under them.
SHUTDOWN_GRACE_SECONDS = 10.0
# FastAPI's own OpenTelemetry: with a tracer provider set (loop/tracing.py's, when traces are
# on) a SERVER span per request, continuing the caller's `traceparent` if it sent one; a run
# is a child of its request's span. Only the traces: metrics are Prometheus's, and it never
# sets up exporters of its own (our setting is the one switch). Probes are left out.
PROBES = frozenset({"/healthz", "/readyz", "/metrics"})
TELEMETRY: TelemetryConfig = {
    "metrics": False,
    "logs": False,
    "operation_spans": False,
    "auto_configure": False,
    "exclude": lambda scope: scope.get("path") in PROBES,
}


def create_app(settings: LoopSettings | None = None, store: RunStore | None = None) -> FastAPI:
    """The loop's app; `store` if it is already open (the app disposes of it at shutdown)."""
    settings = settings or LoopSettings()
    metrics = LoopMetrics(settings.model_name, settings.model_revision)
    app = FastAPI(
        title="leave-copilot agent loop",
        version="0.1.0",
        description="A thin native agent loop between a tool-calling model and the leave MCP "
        "server: runs, streaming, confirmations over HTTP, sessions, step records.",
        lifespan=_lifespan(settings, metrics, store),
        responses=errors(413, 431),  # every route: see the limits below
        docs_url=None,  # docs.install serves them without a CDN
        redoc_url=None,
        telemetry=TELEMETRY,
    )
    _install_routes(app, settings)
    _drop_the_facades_422(app)
    return app


Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


def _lifespan(
    settings: LoopSettings, metrics: LoopMetrics, opened_store: RunStore | None
) -> Lifespan:
    """What the app holds while it serves: the run store, the MCP connections, the model
    client and the run manager with its lease; shut down in the order that lets runs record
    how they ended."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = opened_store or RunStore(settings.store_url)
        pool = _mcp_pool(settings)
        model = _model(settings, metrics)
        rejected = RejectedTokens(settings.rejected_token_cache_seconds)
        manager = _run_manager(settings, metrics, store, pool, model, rejected)
        await manager.mark_interrupted()
        if manager.peer_url is not None:
            logger.info(
                "loop %s: other replicas reach it at %s", manager.instance_id, manager.peer_url
            )
        lease = asyncio.create_task(manager.keep_lease())
        app.state.settings = settings
        app.state.metrics = metrics
        app.state.manager = manager
        # a front end's housekeeping requests: the same endpoint, a budget of their own
        app.state.task_model = model.limited(settings.task_max_tokens)
        app.state.auth_guard = AuthGuard(
            rejected,
            FailureLimiter(settings.auth_failure_limit, settings.auth_failure_window_seconds),
        )
        app.state.probe = httpx2.AsyncClient(timeout=3.0)
        app.state.peers = peer_client()  # requests about runs other loop replicas hold
        try:
            yield
        finally:
            lease.cancel()
            await _stop_runs(manager)
            await manager.release_lease()
            await pool.close()
            await model.close()
            await app.state.probe.aclose()
            await app.state.peers.aclose()
            store.dispose()

    return lifespan


def _install_routes(app: FastAPI, settings: LoopSettings) -> None:
    # Outermost: oversized headers, and bodies, are refused before anything parses or
    # forwards them (a body without Content-Length once more than the limit has arrived).
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes, render=error_body)
    app.add_middleware(HeaderSizeLimit, max_bytes=settings.max_header_bytes, render=error_body)
    app.include_router(health.router)
    app.include_router(runs.router)
    app.include_router(openai_facade.router)
    handlers.install(app)
    docs.install(app)
    chat_page.install(app, settings)


def _drop_the_facades_422(app: FastAPI) -> None:
    document = app.openapi

    def openapi() -> dict[str, Any]:
        """The generated document, minus the 422 FastAPI lists for the facade (which answers
        invalid requests with 400, as the OpenAI API does)."""
        schema = document()
        schema["paths"][openai_facade.FACADE_PATH]["post"]["responses"].pop("422", None)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _mcp_pool(settings: LoopSettings) -> McpPool:
    return McpPool(
        settings.mcp_url,
        connect_timeout=settings.mcp_connect_timeout_seconds,
        read_timeout=settings.tool_timeout_seconds + settings.confirmation_timeout_seconds,
        recheck_seconds=settings.rejected_token_cache_seconds,
    )


def _run_manager(
    settings: LoopSettings,
    metrics: LoopMetrics,
    store: RunStore,
    pool: McpPool,
    model: OpenAIChatModel,
    rejected: RejectedTokens,
) -> RunManager:
    return RunManager(
        pool=pool,
        model=model,
        streaming_model=model.streaming(),
        config=_loop_config(settings),
        store=store,
        metrics=metrics,
        max_concurrent_runs=settings.max_concurrent_runs,
        session_max_messages=settings.session_max_messages,
        instance_id=settings.identity,
        lease_seconds=settings.lease_seconds,
        rejected=rejected,
        peer_url=settings.peer_address(),  # resolved already by `python -m loop`
    )


def _model(settings: LoopSettings, metrics: LoopMetrics) -> OpenAIChatModel:
    return OpenAIChatModel(
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


def _loop_config(settings: LoopSettings) -> LoopConfig:
    return LoopConfig(
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
        # the local date, as the MCP server reads "today" (both follow TZ)
        today=dt.date.today if settings.date_in_prompt else None,
    )


async def drain(app: FastAPI) -> None:
    """Shutdown's first step, before the open requests are waited for: end the runs they wait
    on (a run's answer, its event stream), so that they end too."""
    manager = getattr(app.state, "manager", None)
    if manager is not None:
        await _stop_runs(manager)


async def _stop_runs(manager: RunManager) -> None:
    """Cancel the runs still going and wait until each has recorded how it ended; a run that
    waits for a person's confirmation is left for the next loop to take over and go on with."""
    tasks = [run.task for run in manager.active.values() if run.task is not None]
    for run in manager.active.values():
        run.suspending = manager.resumable(run)
    for task in tasks:
        task.cancel()
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE_SECONDS)
    if pending:
        logger.warning(
            "%d run(s) did not finish within %.0f s of shutdown",
            len(pending),
            SHUTDOWN_GRACE_SECONDS,
        )
