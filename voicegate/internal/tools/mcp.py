"""Tools from Model Context Protocol servers, offered to the model beside the built-in tools.

Each `[[mcp.servers]]` entry is one `McpConnection`, held open by a task of its own (the SDK's client
lives in one task from connect to close): a program spoken to over stdio, or a streamable HTTP URL.
At start-up every server is connected and its tools listed, concurrently, each within its
`connect_timeout_s`; a server that fails is reported (/health, `voicegate doctor`) and the agent goes on
without it, while its connection keeps retrying with a growing pause and its tools appear once it
answers. A connection that breaks mid-call is retried the same way.

Only the tools a server's `tools` allow-list names (or every tool, for exactly ["*"]) are registered in
the ToolRegistry, as `<server>__<tool>`, offered on the transports of `enabled_for` while the server is up,
to the callers its `require_identity` admits; each call tells the server who is asking (mcp_caller.py).
A call runs with the server's `timeout_s`; a tool that does not answer in time is abandoned, the caller
hears `mcp.timeout_notice` at once and the model is told. Results are bounded and fenced as untrusted
data (mcp_results.py). A tool the server marks read-only may run in a reply prepared before the caller's
turn is over; any other waits for the turn (internal/tools/registry.py, side effects). Logs name the
server and the tool, never the arguments or the result.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED, CallToolResult

from voicegate.internal.config.display import mask_urls_in
from voicegate.internal.config.mcp import McpConfig, McpServerConfig
from voicegate.internal.conversation.form_digits import carries_entry
from voicegate.internal.tools.mcp_caller import (
    CALLER_HEADERS,
    CALLER_META,
    CallerIds,
    admits,
    caller_headers,
    caller_meta,
)
from voicegate.internal.tools.mcp_results import fenced, result_text
from voicegate.internal.tools.mcp_stderr import ServerStderr
from voicegate.internal.tools.registry import ToolContext, ToolError, ToolRegistry, ToolTimeout

# A task tool (`task_tools`) gets the ledger's task id in this argument, which the model is never shown;
# its status tool is called with {"task_id": ...} and answers one of TASK_STATUSES.
TASK_ARGUMENT = "voicegate_task_id"
TASK_STATUSES = ("running", "succeeded", "failed", "cancelled")


def without_task_argument(parameters: dict[str, Any]) -> dict[str, Any]:
    """A task tool's input schema as the model sees it: voicegate fills the task id itself."""
    properties = {k: v for k, v in (parameters.get("properties") or {}).items() if k != TASK_ARGUMENT}
    required = [r for r in parameters.get("required") or [] if r != TASK_ARGUMENT]
    shown = {**parameters, "properties": properties}
    if "required" in parameters:
        shown["required"] = required
    return shown

log = logging.getLogger(__name__)

McpState = Literal["starting", "up", "down"]
MAX_DESCRIPTION_CHARS = 1000  # a server's tool description reaches the model: bounded like everything else
MAX_LIST_PAGES = 20
RETRY_FIRST_S, RETRY_MAX_S = 1.0, 60.0
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
MAX_TOOL_NAME = 64  # what OpenAI-compatible APIs accept for a function name


def registered_name(server: str, tool: str) -> str:
    """The name the model sees: the server's name, two underscores, the tool's, in the characters and the
    length function names may have (so two servers' `search` tools never collide)."""
    return _NAME_UNSAFE.sub("_", f"{server}__{tool}")[:MAX_TOOL_NAME]


def parameters_of(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's input schema as function parameters (an object schema; anything else takes no arguments)."""
    return schema if isinstance(schema, dict) and schema.get("type") == "object" else {"type": "object",
                                                                                        "properties": {}}


@dataclass(frozen=True, slots=True)
class ListedTool:
    name: str
    description: str
    parameters: dict[str, Any]
    read_only: bool


class McpConnection:
    def __init__(self, config: McpServerConfig, toolset: McpToolset) -> None:
        self.config = config
        self.state: McpState = "starting"
        self.error = ""  # why it is down: the exception's type and a short message (never a header's value)
        self.listed: list[ListedTool] = []
        self.failures = 0
        self._toolset = toolset
        self._client: Client | None = None
        self._wake = asyncio.Event()
        self._stopping = False
        self._ready = asyncio.Event()  # the first attempt is over, whichever way
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def up(self) -> bool:
        return self.state == "up"

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"mcp-{self.name}")
        await self._ready.wait()

    async def close(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._task, self.config.connect_timeout_s)
            if not self._task.done():
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._task

    # ---- the connection's own task -------------------------------------------------------------------

    async def _run(self) -> None:
        pause = RETRY_FIRST_S
        while not self._stopping:
            try:
                async with AsyncExitStack() as stack:
                    async with asyncio.timeout(self.config.connect_timeout_s):
                        client = await stack.enter_async_context(self._client_context())
                        listed = await self._list(client)
                    self._connected(client, listed)
                    pause = RETRY_FIRST_S
                    self._wake.clear()
                    await self._wake.wait()  # until a call finds the connection broken, or the server stops
                    self._client = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a program that will not start, a refused URL, a protocol error
                self._failed(exc)
            finally:
                self._client = None
                self._ready.set()
            if self._stopping:
                break
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), pause)
            pause = min(pause * 2, RETRY_MAX_S)

    def _client_context(self) -> AbstractAsyncContextManager[Client]:
        if self.config.command:
            return self._stdio_client()
        return self._http_client()

    @asynccontextmanager
    async def _stdio_client(self) -> AsyncIterator[Client]:
        """The program, its standard error read line by line into our log (mcp_stderr.py), never written
        straight to voicegate's own standard error past the redaction every log line goes through."""
        config = self.config
        with ServerStderr(self.name) as stderr:
            parameters = StdioServerParameters(command=config.command, args=config.args, env=config.env or None)
            async with Client(stdio_client(parameters, errlog=stderr.writer)) as client:
                yield client

    @asynccontextmanager
    async def _http_client(self) -> AsyncIterator[Client]:
        async with httpx2.AsyncClient(headers=self.config.headers, event_hooks={"request": [_caller_headers]},
                                      timeout=httpx2.Timeout(self.config.connect_timeout_s, read=300.0)) as http:
            async with Client(streamable_http_client(self.config.url, http_client=http)) as client:
                yield client

    async def _list(self, client: Client) -> list[ListedTool]:
        tools: list[ListedTool] = []
        cursor: str | None = None
        for _page in range(MAX_LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            for tool in page.tools:
                read_only = bool(tool.annotations is not None and tool.annotations.read_only_hint)
                tools.append(ListedTool(tool.name, (tool.description or "")[:MAX_DESCRIPTION_CHARS],
                                        parameters_of(tool.input_schema), read_only))
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    def _connected(self, client: Client, listed: list[ListedTool]) -> None:
        self._client = client
        self.listed = listed
        self.state = "up"
        self.error = ""
        log.info("mcp server up", extra={"mcp_server": self.name, "tools_listed": len(listed)})
        self._toolset.listed(self)
        self._ready.set()

    def _failed(self, exc: BaseException) -> None:
        self.state = "down"
        self.failures += 1
        self.error = describe_failure(exc)
        if self.failures == 1 or self.failures & (self.failures - 1) == 0:  # 1st, 2nd, 4th... : no flood
            log.warning("mcp server unavailable; the agent goes on without its tools: %s", self.error,
                        extra={"mcp_server": self.name, "failures": self.failures})

    # ---- calls (from reply tasks) ----------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any], caller: dict[str, Any] | None = None
                   ) -> CallToolResult:
        """Run `tool`, telling the server who asks (`caller`, under CALLER_META in the request's `_meta`);
        TimeoutError after the server's timeout_s, ToolError when the server is unreachable or answers
        with a protocol error."""
        client = self._client
        if client is None or not self.up:
            raise ToolError(f"the {self.name} tool server is not reachable right now")
        meta: Any = {CALLER_META: caller} if caller is not None else None
        try:
            async with asyncio.timeout(self.config.timeout_s):
                return await client.call_tool(tool, arguments, meta=meta)
        except TimeoutError:
            raise
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:  # the server's own answer: the model may read it
                raise ToolError(fenced(self.name, tool, exc.message, self._toolset.config.max_result_chars)) from None
            self._lost(exc)
        except Exception as exc:
            self._lost(exc)
        raise ToolError(f"the {self.name} tool server is not reachable right now")

    def _lost(self, exc: BaseException) -> None:
        """The transport broke (the program died, the connection dropped): reconnect in the background."""
        self.state = "down"
        self.error = describe_failure(exc)
        log.warning("mcp server connection lost: %s", self.error, extra={"mcp_server": self.name})
        self._wake.set()


async def _caller_headers(request: httpx2.Request) -> None:
    """A `tools/call` over HTTP carries its caller in headers too (mcp_caller.py CALLER_HEADERS): the SDK
    sends each message from a task of its own, so they are read back from the message itself."""
    if request.method != "POST":
        return
    try:
        body = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead):
        return
    for name in CALLER_HEADERS:
        request.headers.pop(name, None)  # never one the configured headers or anything else put there
    request.headers.update(caller_headers(body))


def describe_failure(exc: BaseException) -> str:
    """A short, single-line reason: the innermost exception of a group, its type and message."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    message = mask_urls_in(" ".join(str(exc).split()))[:200]  # a URL's token never reaches /health or doctor
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


class McpToolset:
    """Every configured MCP server, and their allowed tools in the registry."""

    def __init__(self, config: McpConfig, registry: ToolRegistry, caller_ids: CallerIds | None = None) -> None:
        self.config = config
        self.registry = registry
        # How a caller's opaque id is made (from the owner-key secret: mcp_caller.py); set by the gateway.
        self.caller_ids = caller_ids
        self.connections = [McpConnection(server, self) for server in config.servers]

    async def start(self) -> None:
        await asyncio.gather(*(connection.start() for connection in self.connections))

    async def close(self) -> None:
        await asyncio.gather(*(connection.close() for connection in self.connections))

    def listed(self, connection: McpConnection) -> None:
        """Register the allowed tools a server just listed (on every connect: a server that came up late,
        or one that lists a tool it did not have before)."""
        server = connection.config
        names = {tool.name for tool in connection.listed}
        missing = [name for name in server.tools if name != "*" and name not in names]
        if missing:
            log.warning("mcp server does not list allowed tool(s): %s", ", ".join(missing),
                        extra={"mcp_server": server.name})
        for tool in connection.listed:
            name = registered_name(server.name, tool.name)
            if server.allows(tool.name) and name not in self.registry:
                self._register(connection, tool, name)

    def _register(self, connection: McpConnection, tool: ListedTool, name: str) -> None:
        server = connection.config
        config = self.config

        def available(context: ToolContext) -> bool:
            call = context.call
            return (connection.up and call is not None and call.transport in server.enabled_for
                    and admits(server, call.identity)
                    and any(listed.name == tool.name for listed in connection.listed))

        task_tool = tool.name in server.task_tools

        async def run(arguments: dict[str, Any], context: ToolContext) -> str:
            if carries_entry(arguments, context.call.slots if context.call is not None else None):
                raise ToolError("digits the caller entered in a digit form (collect_digits) are never sent to tools "
                                "from other servers; they may be a PIN or a card number. Do not retry with them.")
            caller = self._caller(server, context)
            if task_tool:  # the server keys its work on the ledger's task id, so it can answer for it later
                arguments = {**arguments, TASK_ARGUMENT: str(context.extras.get("task_id", ""))}
            try:
                result = await connection.call(tool.name, arguments, caller)
            except TimeoutError:
                context.say(config.timeout_notice)
                raise ToolTimeout(f"{tool.name} did not answer within {server.timeout_s:g} s, so it was abandoned; "
                                  "the caller has been told it cannot be checked right now. Do not call it again "
                                  "in this turn.") from None
            text = fenced(server.name, tool.name, result_text(result), config.max_result_chars)
            if result.is_error:
                raise ToolError(text)
            return text

        status_tool = server.task_tools.get(tool.name, "")

        async def status(task_id: str, context: ToolContext) -> str | None:
            """The work's status as the server's status tool says it: one word of the ledger's, else no news.
            Asked on behalf of the caller whose recall it is (the caller the work was started for: the
            ledger is theirs), told to the server like the call that started it, so a server that
            authorises every call on who is asking answers this one too."""
            result = await connection.call(status_tool, {"task_id": task_id}, self._caller(server, context))
            word = result_text(result).strip().strip(".").lower()
            return word if not result.is_error and word in TASK_STATUSES else None

        self.registry.register(name, tool.description or f"{tool.name} (from the {server.name} tool server)",
                               without_task_argument(tool.parameters) if task_tool else tool.parameters, run,
                               available=available, side_effects=not tool.read_only or task_tool,
                               source=f"mcp:{server.name}", untrusted=True, starts_work=task_tool,
                               caller_status=status if task_tool and status_tool else None,
                               slow=tool.name in server.slow_tools)

    def _caller(self, server: McpServerConfig, context: ToolContext) -> dict[str, Any]:
        """What `server` is told of the caller of the call `context` runs in (mcp_caller.py)."""
        return caller_meta(server, context.call.identity if context.call is not None else None, self.caller_ids)

    def describe(self) -> dict[str, Any]:
        """For /health and GET /api/agent: each server's state and the tools it offers (names only)."""
        servers = []
        for connection in self.connections:
            offered = [registered_name(connection.name, tool.name) for tool in connection.listed
                       if connection.config.allows(tool.name)]
            entry: dict[str, Any] = {"name": connection.name, "transport": connection.config.transport,
                                     "state": connection.state, "tools": offered,
                                     "enabled_for": list(connection.config.enabled_for)}
            if connection.error:
                entry["error"] = connection.error
            servers.append(entry)
        return {"ok": all(connection.up for connection in self.connections), "servers": servers}
