"""The leave MCP server: leave tools over MCP Streamable HTTP with server-side rules."""
