"""The MCP side: the Python SDK's codec over a state backend (:mod:`.codec`: ``KeysetCodec``,
``HandleCodec``) and the helpers any server uses (:mod:`.mcp`: request fingerprints,
``input_required`` results, retries, the client capability check, the uniform wire error)."""
