"""The doctor's look at `[[mcp.servers]]`: each server is started (or reached) as the server would, its
tools listed, and the allow-list compared with what it lists; then it is closed again. What it prints never
holds a URL's userinfo or query, nor a program argument that may be a token (internal/config/display.py)."""

from __future__ import annotations

import asyncio
import shlex

from voicegate.internal.config import Config
from voicegate.internal.config.display import mask_url, masked_args
from voicegate.internal.config.mcp import ALL_TOOLS, McpServerConfig
from voicegate.internal.tools.mcp import McpConnection, McpToolset
from voicegate.internal.tools.registry import ToolRegistry
from voicegate.server.doctor import Check


def check_mcp(config: Config) -> list[Check]:
    if not config.mcp.servers:
        return [Check("mcp", None, "no [[mcp.servers]] configured")]
    return asyncio.run(_probe(config))


async def _probe(config: Config) -> list[Check]:
    toolset = McpToolset(config.mcp, ToolRegistry())
    try:
        await toolset.start()
        return [_verdict(connection) for connection in toolset.connections]
    finally:
        await toolset.close()


def _fix(server: McpServerConfig) -> str:
    if server.command:
        return (f"run `{shlex.join([server.command, *masked_args(server.args)])}` by hand (arguments that may be "
                "tokens masked): it must start and speak MCP on its standard input and output (or correct "
                "command/args)")
    return (f"check that the server answers at {mask_url(server.url)} (and its headers / headers_env, if it wants "
            "a token)")


def _verdict(connection: McpConnection) -> Check:
    server = connection.config
    name = f"mcp server {server.name}"
    if not connection.up:
        return Check(name, False, f"not reachable ({connection.error}); calls go on without its tools", _fix(server))
    listed = [tool.name for tool in connection.listed]
    if not server.tools:
        return Check(name, False, f"{len(listed)} tool(s) listed, none offered: its tools allow-list is empty",
                     f"list the tools to offer in tools = [...] (listed: {', '.join(listed) or 'none'}), or "
                     f'tools = ["{ALL_TOOLS}"] for all of them')
    missing = [tool for tool in server.tools if tool != ALL_TOOLS and tool not in listed]
    if missing:
        return Check(name, False, f"the allow-list names tool(s) the server does not list: {', '.join(missing)}",
                     f"correct tools = [...] (listed: {', '.join(listed) or 'none'})")
    offered = [tool for tool in listed if server.allows(tool)]
    return Check(name, True, f"{len(listed)} tool(s) listed; offered on {', '.join(server.enabled_for)}: "
                 f"{', '.join(offered)}")
