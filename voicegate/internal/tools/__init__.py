"""Tools the model may call: the registry every tool is declared in (registry.py), and those from outside
the server, MCP servers (mcp.py)."""
