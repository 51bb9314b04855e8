"""Tools for the agent: what a deployer registers at the composition root and passes to
`create_gateway_application(config, tools=...)`.

This module is the stable import path; the definitions live in voicegate.internal.tools.registry and are
re-exported here unchanged. docs/agent-runtime.md, "Tools", shows a complete tool.
"""

from voicegate.internal.tools.registry import ToolContext, ToolError, ToolHandler, ToolRegistry, ToolTimeout

__all__ = ["ToolContext", "ToolError", "ToolHandler", "ToolRegistry", "ToolTimeout"]
