"""The MCP connection pool against the real MCP server process."""

from __future__ import annotations

import pytest
from mcp.types import ToolListChangedNotification

from loop.mcp_pool import McpConnection, McpPool, McpUnauthorized, McpUnavailable
from tests.support import free_port, mcp_server


@pytest.fixture(scope="module")
def mcp_url(tmp_path_factory):
    with mcp_server(tmp_path_factory.mktemp("pool")) as base:
        yield f"{base}/mcp"


async def test_one_connection_per_token_reused_across_calls(mcp_url):
    pool = McpPool(mcp_url)
    try:
        first = await pool.connection("demo-token-employee")
        again = await pool.connection("demo-token-employee")
        other = await pool.connection("demo-token-other")
        assert first is again and first is not other and pool.connects == 2
        names = [t.name for t in await first.tools()]
        assert "cancel_approved_leave" in names
        destructive = {t.name for t in await first.tools() if t.needs_confirmation}
        assert destructive == {"cancel_approved_leave"}
        result = await first.call("get_leave_balance", {})
        assert not result.is_error and result.structured["employee_id"] == "E001"
    finally:
        await pool.close()


async def test_a_rejected_token_is_unauthorized_not_unavailable(mcp_url):
    pool = McpPool(mcp_url)
    with pytest.raises(McpUnauthorized):
        await pool.connection("not-a-token")
    await pool.close()


async def test_no_server_is_unavailable():
    pool = McpPool(f"http://127.0.0.1:{free_port()}/mcp", connect_timeout=5)
    with pytest.raises(McpUnavailable):
        await pool.connection("demo-token-employee")
    await pool.close()


async def test_a_tools_list_changed_notification_drops_the_cached_list(mcp_url):
    connection = McpConnection(mcp_url, "demo-token-employee", connect_timeout=5, read_timeout=5)
    await connection.open()
    try:
        cached = await connection.tools()
        assert await connection.tools() is cached
        await connection._on_message(ToolListChangedNotification())
        assert await connection.tools() is not cached
    finally:
        await connection.close()


async def test_refused_tokens_leave_nothing_behind_in_the_pool(mcp_url):
    pool = McpPool(mcp_url)
    try:
        for n in range(5):
            with pytest.raises(McpUnauthorized):
                await pool.connection(f"garbage-{n}")
        await pool.connection("demo-token-employee")
        assert pool.has_open("demo-token-employee") and not pool.has_open("garbage-0")
        assert len(pool._locks) == 1  # one per live connection, none per refused token
    finally:
        await pool.close()
