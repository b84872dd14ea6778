"""A release gate for a fine-tune: the agent-level scenario suite, run through the real loop
and a scratch MCP server, scored by the end state of the database and the run record."""
