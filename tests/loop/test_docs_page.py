"""The API's pages as a browser shows them on a host without internet: the real loop over a
socket, headless Chromium that can reach only 127.0.0.1 (tests/browser.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from tests.browser import rendered_dom
from tests.support import free_port, loop_service

OPERATIONS = [
    ("post", "/v1/runs"),
    ("get", "/v1/runs/{run_id}"),
    ("post", "/v1/runs/{run_id}/confirmations/{confirmation_id}"),
    ("post", "/v1/chat/completions"),
]


@pytest.fixture(scope="module")
def loop(tmp_path_factory) -> Iterator[str]:
    """The loop alone: its pages need neither the model nor the MCP server."""
    workdir = tmp_path_factory.mktemp("docs")
    nowhere = f"http://127.0.0.1:{free_port()}"
    with loop_service(workdir, f"{nowhere}/v1", f"{nowhere}/mcp") as (base, _):
        yield base


def test_swagger_ui_shows_the_operations_offline(loop):
    page = rendered_dom(f"{loop}/docs", budget_ms=15000)
    blocks = re.findall(r'class="opblock opblock-(\w+)[^"]*" id="operations-[^"]*"', page)
    assert len(blocks) >= 8, page[-2000:]  # one per operation, not a blank page
    for method, path in OPERATIONS:
        # the operation's summary line: its method, then (within the same line) its path
        summary = re.search(
            rf'opblock-summary-method">{method.upper()}</span>.{{0,150}}?'
            rf'data-path="{re.escape(path)}"',
            page,
        )
        assert summary, (method, path)
    assert "Authorize" in page  # the bearer scheme, from the document's securitySchemes
    assert "cdn." not in page  # nothing the page loads comes from elsewhere


def test_redoc_shows_the_operations_offline(loop):
    page = rendered_dom(f"{loop}/redoc", budget_ms=15000)
    for _, path in OPERATIONS:
        assert path in page, page[-2000:]
    assert "employeeToken" in page
    assert "cdn." not in page and "fonts.googleapis" not in page


def test_the_pages_files_come_from_the_loop(loop):
    for name in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js"):
        response = httpx.get(f"{loop}/docs-assets/{name}")
        assert response.status_code == 200 and len(response.content) > 100_000, name
    assert httpx.get(f"{loop}/docs-assets/core.py").status_code == 404
    assert httpx.get(f"{loop}/docs-assets/../core.py").status_code == 404
