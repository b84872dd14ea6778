"""The ASGI app: MCP at /mcp (behind bearer auth), plus /healthz, /readyz and /metrics."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from mcp.server.auth.routes import cors_middleware
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from common.limits import HeaderSizeLimit
from common.sqlite import utcnow
from common.tracing import TraceContext

from .acting_for import ActingFor
from .auth import EmployeeTokenVerifier, SignInOutage
from .identity import Identities, IdentityStore
from .leaves import LeaveService, LeaveStore
from .metrics import ServerMetrics
from .oidc import SignIn, SignInSettings
from .settings import ServerSettings
from .storage import Database
from .tools import build_server

logger = logging.getLogger(__name__)


class CountAuthFailures:
    """Counts the SDK's 401 answers by reason, without touching the response."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        has_token = any(
            name == b"authorization" and value.lower().startswith(b"bearer ")
            for name, value in scope.get("headers", [])
        )

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401:
                self.metrics.auth_failures.labels("invalid" if has_token else "missing").inc()
            await send(message)

        await self.app(scope, receive, counting_send)


def transport_security(settings: ServerSettings) -> TransportSecuritySettings:
    if "*" in settings.allowed_hosts:  # explicit opt-out, refused in production by settings
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=settings.allowed_hosts,
        allowed_origins=settings.allowed_origins,
    )


def create_app(settings: ServerSettings, database: Database | None = None) -> ASGIApp:
    database = database or Database(settings.database_url)
    database.create_schema()
    # The stores' async faces: all the served app calls (see storage.AsyncStore).
    leaves = LeaveStore(LeaveService(database))
    identities = IdentityStore(Identities(database, production=settings.is_production))
    metrics = ServerMetrics()
    server = build_server(
        leaves,
        metrics,
        language=settings.language,
        elicitation_state_keys=settings.elicitation_state_keys,
        confirmation_ttl_seconds=settings.confirmation_ttl_seconds,
        token_verifier=EmployeeTokenVerifier(identities, sign_in(settings, identities)),
        auth=AuthSettings(
            # the protected-resource metadata names who issues the access tokens taken here
            issuer_url=AnyHttpUrl(settings.oidc_issuer or settings.base_url),
            resource_server_url=AnyHttpUrl(f"{settings.base_url}/mcp"),
            validate_token_resource=False,
        ),
    )
    add_probes(server, leaves, metrics)
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        transport_security=transport_security(settings),
        host=settings.host,
    )
    audit_while_serving(app, leaves, metrics, settings.confirmation_ttl_seconds)
    name_the_issuer_as_set(app, settings)
    acting = ActingFor(app, refused=metrics.auth_failures.labels("acting_for").inc)
    served: ASGIApp = CountAuthFailures(SignInOutage(acting), metrics)
    # A tool call continues the caller's trace: the SDK reads it from the request's `_meta`,
    # this from the HTTP `traceparent` header (a client that sends only that).
    traced = TraceContext(served) if settings.otlp_traces_endpoint else served
    # uvicorn's parser reads header fields of any size: a 5 MB Authorization header was read,
    # hashed and looked up. Refused first, before anything else sees it.
    return HeaderSizeLimit(traced, settings.max_header_bytes)


def add_probes(server: MCPServer, leaves: LeaveStore, metrics: ServerMetrics) -> None:
    """/healthz (the process answers), /readyz (and its database does), /metrics."""

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    @server.custom_route("/readyz", methods=["GET"])
    async def readyz(_: Request) -> Response:
        try:
            await leaves.ping()
        except Exception as exc:  # the reason, not the stack: it is a public endpoint
            return JSONResponse(
                {"status": "unavailable", "database": type(exc).__name__}, status_code=503
            )
        return JSONResponse({"status": "ready", "database": "ok"})

    @server.custom_route("/metrics", methods=["GET"])
    async def prometheus_metrics(_: Request) -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)


def audit_while_serving(
    app: Starlette, leaves: LeaveStore, metrics: ServerMetrics, ttl_seconds: float
) -> None:
    """The SDK's lifespan, with the audit of abandoned confirmations running beside it."""
    sdk_lifespan = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app_: object) -> AsyncIterator[None]:
        async with sdk_lifespan(app_), anyio.create_task_group() as tasks:
            tasks.start_soon(audit_abandoned_confirmations, leaves, metrics, ttl_seconds)
            yield
            tasks.cancel_scope.cancel()

    app.router.lifespan_context = lifespan


RESOURCE_METADATA = "/.well-known/oauth-protected-resource"


def name_the_issuer_as_set(app: Starlette, settings: ServerSettings) -> None:
    """The SDK's protected-resource metadata names the token issuer as pydantic normalises a
    URL, a slash added to a bare host (`https://idp.example.com/`): not the `iss` the
    provider's tokens carry, which a client compares as a string. Its route answers with the
    issuer (and resource) exactly as set instead."""
    body = {
        "resource": f"{settings.base_url}/mcp",
        "authorization_servers": [settings.oidc_issuer or settings.base_url],
        "bearer_methods_supported": ["header"],
    }

    async def metadata(_: Request) -> Response:
        return JSONResponse(body, headers={"Cache-Control": "public, max-age=3600"})

    for index, route in enumerate(app.router.routes):
        if isinstance(route, Route) and route.path.startswith(RESOURCE_METADATA):
            app.router.routes[index] = Route(
                route.path,
                endpoint=cors_middleware(metadata, ["GET", "OPTIONS"]),
                methods=["GET", "OPTIONS"],
            )


def sign_in(settings: ServerSettings, identities: IdentityStore) -> SignIn | None:
    if settings.oidc_issuer is None:
        return None
    assert settings.oidc_audience and settings.oidc_jwks_url  # the settings check it
    return SignIn(
        SignInSettings(
            issuer=settings.oidc_issuer,
            audience=settings.oidc_audience,
            jwks_url=settings.oidc_jwks_url,
            employee_claim=settings.oidc_employee_claim,
            algorithms=tuple(settings.oidc_algorithms),
            refresh_seconds=settings.oidc_jwks_refresh_seconds,
            max_stale_seconds=settings.oidc_jwks_max_stale_seconds,
        ),
        identities,
    )


async def audit_abandoned_confirmations(
    leaves: LeaveStore, metrics: ServerMetrics, ttl_seconds: float
) -> None:
    """Forever: questions unanswered for `ttl_seconds` (a client that cancelled, crashed or
    went away; no answer can be accepted any more) go to the audit log as abandoned."""
    every = min(max(ttl_seconds / 4, 0.25), 60.0)
    while True:
        cutoff = utcnow() - dt.timedelta(seconds=ttl_seconds)
        try:
            abandoned = await leaves.audit_abandoned(cutoff)
        except Exception as error:  # the database may be briefly unavailable: try next time
            logger.warning("auditing abandoned confirmations failed: %s", type(error).__name__)
        else:
            if abandoned:
                metrics.elicitations.labels("abandoned").inc(abandoned)
        await anyio.sleep(every)
