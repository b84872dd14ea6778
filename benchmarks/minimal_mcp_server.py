"""The floor our MCP server is measured against: the MCP SDK with one tool and nothing else.

`search_leaves` answers every call with the same result, read once from a JSON file (a real
answer of our server, so both send the same bytes): no auth, no database, no metrics, no
output schema. Served like ours (the SDK's Streamable HTTP app, stateful, uvicorn, no access
log), with `/healthz` for readiness.

    python benchmarks/minimal_mcp_server.py --port 8091 --payload result.json
"""

# No `from __future__ import annotations`: the SDK reads the tool's signature at runtime.

import argparse
import json
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent
from starlette.requests import Request
from starlette.responses import JSONResponse, Response


def build_app(payload: dict[str, Any]) -> Any:
    server = MCPServer("minimal-mcp")
    text = json.dumps(payload, ensure_ascii=False)

    @server.tool()
    async def search_leaves(keyword: str, status: str | None = None) -> CallToolResult:
        """Search your leave requests."""
        return CallToolResult(
            content=[TextContent(type="text", text=text)], structured_content=payload
        )

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return server.streamable_http_app(streamable_http_path="/mcp")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--payload", type=Path, required=True, help="structured result (JSON)")
    args = parser.parse_args()
    payload = json.loads(args.payload.read_text(encoding="utf-8"))
    uvicorn.run(
        build_app(payload),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
