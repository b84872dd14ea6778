"""The API's pages, /docs (Swagger UI) and /redoc, with their scripts and styles served by the
loop itself (the copies the fastapi-offline package ships) instead of a CDN: an air-gapped host
shows them too."""

from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import FastAPI, HTTPException, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse

from .runs import document_events

ASSETS_PATH = "/docs-assets"
ASSETS = Path(fastapi_offline.__file__).parent / "static"
ASSET_FILES = frozenset(
    {"swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png"}
)


def install(app: FastAPI) -> None:
    """Serve the pages and their files; `app` must be made with docs_url and redoc_url None."""
    title = app.title
    generated = app.openapi

    def openapi() -> dict[str, Any]:
        document = generated()  # cached by FastAPI: adding to it again changes nothing
        document_events(document)
        return document

    app.openapi = openapi  # type: ignore[method-assign]

    @app.get(f"{ASSETS_PATH}/{{name}}", include_in_schema=False)
    async def asset(name: str) -> FileResponse:
        if name not in ASSET_FILES:  # these names only: nothing else of the package is served
            raise HTTPException(404, "Not Found")
        return FileResponse(ASSETS / name)

    def urls(request: Request) -> tuple[str, str]:
        """(the document's URL, the files' URL) under the path the loop is served at."""
        root = request.scope.get("root_path", "").rstrip("/")
        return f"{root}{app.openapi_url}", f"{root}{ASSETS_PATH}"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        openapi_url, assets = urls(request)
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{title} - Swagger UI",
            swagger_js_url=f"{assets}/swagger-ui-bundle.js",
            swagger_css_url=f"{assets}/swagger-ui.css",
            swagger_favicon_url=f"{assets}/favicon.png",
            oauth2_redirect_url=None,
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        openapi_url, assets = urls(request)
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{title} - ReDoc",
            redoc_js_url=f"{assets}/redoc.standalone.js",
            redoc_favicon_url=f"{assets}/favicon.png",
            with_google_fonts=False,
        )
