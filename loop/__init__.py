"""The native agent loop: an MCP client, an OpenAI-compatible client and a loop, as a service."""
