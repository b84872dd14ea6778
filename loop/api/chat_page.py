"""The chat page for employees (docs/chat-page.md): `GET /` is the page, `/chat/<file>` its
script, styles and icon (from loop/chat_page/, those files only: nothing is fetched from
elsewhere, so it works on a host without internet), `/chat/config` how it signs people in.

The page asks the runs API (`/v1/runs`, streamed) with the person's own bearer token, so the
MCP server decides who acts, as for any other client. Its scripts never turn what the model or
the leave system says into markup, and the Content-Security-Policy below forbids inline script,
so that a leave reason or an answer holding `<script>` stays text even if one day it did not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel

from common.demo import DEMO_EMPLOYEES

from ..settings import LoopSettings

PAGE = Path(__file__).resolve().parent.parent / "chat_page"
ASSET_PATH = "/chat"
# name → media type; these names only (an allow-list, as /docs-assets has)
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "sign-in.js": "text/javascript; charset=utf-8",
    "runs.js": "text/javascript; charset=utf-8",
    "words.js": "text/javascript; charset=utf-8",
    "chat.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
# The runs API refuses a longer input (loop/api/runs.py RunRequest.input): the page says so first.
MAX_INPUT_CHARS = 4000
# Every answer of the page's own routes: no sniffing a text as script, no page of ours in a
# frame (clickjacking the confirmation buttons), no address (with a sign-in code in it) sent on.
COMMON_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


class DemoEmployeeView(BaseModel):
    employee_id: str
    name: str
    role: Literal["employee", "manager"]
    token: str


class ChatConfig(BaseModel):
    """What the page needs to sign a person in; nothing in it is a secret (a public client has
    none, and the demo tokens are the seed's known ones, refused in production)."""

    sign_in: Literal["oidc", "demo", "none"]
    issuer: str | None = None
    client_id: str | None = None
    scopes: str | None = None
    resource: str | None = None
    demo_employees: list[DemoEmployeeView] = []
    confirmation_timeout_seconds: float
    max_input_chars: int = MAX_INPUT_CHARS


def chat_config(settings: LoopSettings) -> ChatConfig:
    timeout = settings.confirmation_timeout_seconds
    if settings.chat_oidc_issuer is not None:
        return ChatConfig(
            sign_in="oidc",
            issuer=settings.chat_oidc_issuer,
            client_id=settings.chat_oidc_client_id,
            scopes=settings.chat_oidc_scopes,
            resource=settings.chat_oidc_resource,
            confirmation_timeout_seconds=timeout,
        )
    if not settings.chat_demo_sign_in:
        return ChatConfig(sign_in="none", confirmation_timeout_seconds=timeout)
    managers = {e.manager_id for e in DEMO_EMPLOYEES}
    demo = [
        DemoEmployeeView(
            employee_id=e.employee_id,
            name=e.name,
            role="manager" if e.employee_id in managers else "employee",
            token=e.token,
        )
        for e in DEMO_EMPLOYEES
    ]
    return ChatConfig(sign_in="demo", demo_employees=demo, confirmation_timeout_seconds=timeout)


def content_security_policy(settings: LoopSettings) -> str:
    """Scripts, styles and images from the loop only, none inline; requests to the loop and
    (for discovery, the token endpoint and revocation) to the identity provider's origin."""
    connect = ["'self'"]
    if settings.chat_oidc_issuer:
        issuer = urlsplit(settings.chat_oidc_issuer)
        connect.append(f"{issuer.scheme}://{issuer.netloc}")
    return "; ".join(
        [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self'",
            f"connect-src {' '.join(connect)}",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    )


def install(app: FastAPI, settings: LoopSettings) -> None:
    config = chat_config(settings).model_dump(mode="json")
    page_headers = {
        **COMMON_HEADERS,
        "Content-Security-Policy": content_security_policy(settings),
        # a new version of the page (and of its scripts, below) is taken at the next load
        "Cache-Control": "no-cache",
    }

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(
            PAGE / "index.html", media_type="text/html; charset=utf-8", headers=page_headers
        )

    @app.get(f"{ASSET_PATH}/config", include_in_schema=False)
    async def page_config() -> JSONResponse:
        headers: dict[str, Any] = {**COMMON_HEADERS, "Cache-Control": "no-store"}
        return JSONResponse(config, headers=headers)

    @app.get(f"{ASSET_PATH}/{{name}}", include_in_schema=False)
    async def asset(name: str) -> FileResponse:
        media_type = ASSETS.get(name)
        if media_type is None:  # these names only: nothing else of the folder is served
            raise HTTPException(404, "Not Found")
        headers = {**COMMON_HEADERS, "Cache-Control": "no-cache"}
        return FileResponse(PAGE / name, media_type=media_type, headers=headers)
