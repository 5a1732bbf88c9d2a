"""mrtr-state proxy: seal the requestState of any MCP server over Streamable HTTP."""
