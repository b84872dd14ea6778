"""Liveness, readiness (the model endpoint and the MCP server answer) and Prometheus metrics."""

import asyncio
from typing import Literal

import httpx2
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, Field

from ..metrics import LoopMetrics
from ..settings import LoopSettings

router = APIRouter(tags=["health"])


class Readiness(BaseModel):
    status: Literal["ready", "unavailable"]
    model: str = Field(description='"ok", or why the model endpoint is not')
    mcp: str = Field(description='"ok", or why the MCP server is not')


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
async def readyz(request: Request) -> JSONResponse:
    probe: httpx2.AsyncClient = request.app.state.probe
    settings: LoopSettings = request.app.state.settings

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


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={200: {"description": "Prometheus text exposition format."}},
)
async def prometheus(request: Request) -> Response:
    metrics: LoopMetrics = request.app.state.metrics
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
