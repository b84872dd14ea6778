"""Alerts reach someone: a real Prometheus with the bundle's rules fires, a real Alertmanager
(Debian's prometheus-alertmanager) configured exactly as compose configures it groups the
alert and posts it to the site's webhook, here a local one that records what it gets."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from devtools import prometheus
from ops import compose
from tests.support import (
    free_port,
    loop_service,
    mcp_server,
    model_simulator,
    running,
    serving_in_thread,
    wait_until,
)

from .helpers import tool

EMPLOYEE = {"Authorization": "Bearer demo-token-employee"}


def alertmanager_binary() -> str:
    found = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if found is None:
        pytest.skip("needs Debian's prometheus-alertmanager (.ci/run installs it)")
    return found


def compose_config(webhook: str) -> str:
    """The Alertmanager config the compose stack gives its container, for this webhook."""
    environ = {**os.environ, "ALERTMANAGER_WEBHOOK_URL": webhook}
    content: str = compose.config(sim=True, environ=environ)["configs"]["alertmanager-config"][
        "content"
    ]
    return content


def test_the_config_compose_writes_is_valid_with_and_without_a_webhook(tmp_path):
    amtool = shutil.which("amtool") or pytest.skip("needs amtool (prometheus-alertmanager)")
    for webhook in ("https://hooks.example.com/services/T0/B0?x=1&y=2", ""):
        path = tmp_path / "alertmanager.yml"
        path.write_text(compose_config(webhook))
        done = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        assert ("webhook_configs" in path.read_text()) == bool(webhook)
        assert webhook in path.read_text()


def test_a_fired_alert_reaches_the_sites_webhook(tmp_path: Path):
    tool("prometheus")
    binary = alertmanager_binary()
    received: list[dict[str, Any]] = []

    async def webhook(request: Request) -> Response:
        received.append(await request.json())
        return JSONResponse({})

    site = Starlette(routes=[Route("/alerts", webhook, methods=["POST"])])
    with serving_in_thread(site, "the site's webhook") as hook:
        config = tmp_path / "alertmanager.yml"
        config.write_text(compose_config(f"{hook}/alerts"))
        am_port = free_port()
        am = [binary, f"--config.file={config}", f"--storage.path={tmp_path / 'am'}",
              f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address="]  # fmt: skip
        with (
            running(
                [],
                {},
                tmp_path / "alertmanager.log",
                f"http://127.0.0.1:{am_port}/-/ready",
                argv=am,
            ),  # fmt: skip
            mcp_server(tmp_path) as mcp,
            model_simulator(tmp_path, profile="instant") as sim,
            loop_service(tmp_path, f"{sim}/v1", f"{mcp}/mcp") as (loop, _),
        ):
            listen = f"127.0.0.1:{free_port()}"
            targets = {"vllm": sim.removeprefix("http://"), "loop": loop.removeprefix("http://"),
                       "mcp-server": mcp.removeprefix("http://")}  # fmt: skip
            settings = prometheus.local_config(
                targets, listen, "1s", alertmanager=f"127.0.0.1:{am_port}"
            )
            path = prometheus.write_config(tmp_path / "prometheus.yml", settings)
            argv = prometheus.command(path, tmp_path / "tsdb", listen)
            with running(
                [], {}, tmp_path / "prometheus.log", f"http://{listen}/-/ready", argv=argv
            ):
                wait_until(
                    lambda: bool(prometheus.query(f"http://{listen}", 'up{job="loop"} == 1')),
                    timeout=30,
                    what="the loop scraped",
                )
                # a tool call written as text: ToolCallWrittenAsText fires at once (for: 0m)
                httpx.post(f"{loop}/v1/runs", headers=EMPLOYEE, timeout=60,
                           json={"input": "查一下我的假單 [sim-fault:tool_call_as_text]"})  # fmt: skip

                def delivered() -> bool:
                    return any(
                        alert["labels"].get("alertname") == "ToolCallWrittenAsText"
                        for message in received
                        for alert in message.get("alerts", [])
                    )

                wait_until(delivered, timeout=90, what="the alert at the site's webhook")
    (message,) = [
        m for m in received if m["commonLabels"].get("alertname") == "ToolCallWrittenAsText"
    ]
    assert message["status"] == "firing" and message["receiver"] == "site"
    alert = message["alerts"][0]
    assert alert["labels"]["severity"] == "critical"
    assert "tool call as text" in alert["annotations"]["summary"]
