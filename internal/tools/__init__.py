"""Tools the model may call that come from outside the server: MCP servers (mcp.py)."""
