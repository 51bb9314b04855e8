"""Tools the model can call: a registry the model sees as OpenAI function definitions.

A tool is a plain async Python function registered at the composition root. Whatever it raises goes
back to the model as a tool result (`{"error": ...}`), never out of the turn: a broken tool is
something the model can apologise for, not a dropped call.

A tool says whether a call of it changes anything outside the reply (`side_effects`: memory writes,
transfers, ending the call). A reply prepared before the caller's turn is over may be thrown away, so
it runs only the tools without side effects until the turn is released (internal/pipeline/responder.py).
Unknown is treated as "has side effects". A run of a tool with side effects is told to the call's
ledger of what the agent did (`ToolContext.record_tool`: the tool's name and whether it worked, never
its arguments or result), unless the tool keeps its own record (`ledger=False`). A tool that only starts
work elsewhere (`starts_work=True`: a ticket, a delivery) is recorded as "started" under a task id it
gets in `context.extras["task_id"]`, with the call's `context.extras["tasks"]` (internal/memory/tasks.py
CallTasks, when the caller has memory) to report how the work goes, during the call or after it; its
optional `status(task_id)` is asked when the caller's `recall` finds the task still open (or
`caller_status(task_id, context)`, told the context of the recall, for work the tool's back end answers
about to its caller only).

Every run is timed and counted by tool, source (`builtin`, or `mcp:<server>` for a tool from an MCP
server: internal/tools/mcp.py) and outcome (`ok`, `error`, `timeout`, `cancelled`), and is a `tool` span under the
turn's span; never with its arguments or its result. A tool whose results come from outside
(`untrusted=True`) has them read as data: the system context then says so (internal/pipeline/context.py).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from opentelemetry import trace

from voicegate.internal.conversation.actions import CALL_TASKS, new_task_id, record_action, tool_action
from voicegate.internal.conversation.state import LiveCall
from voicegate.internal.llm.base import ToolCall, ToolSpec

log = logging.getLogger(__name__)

# A tool result larger than this is cut, so one tool cannot flood the model's context.
MAX_RESULT_CHARS = 8000


async def _say_nothing(text: str) -> None:
    return None


@dataclass(slots=True)
class ToolContext:
    """What a tool may know about the call it runs in (set by the pipeline, not by the model)."""

    session_id: str
    resource_id: str | None
    turn: int
    end_call: Callable[[], None] = lambda: None
    extras: dict[str, Any] = field(default_factory=dict)
    # Told (tool name, ran without error) after a tool with side effects ran: the call's ledger of actions.
    record_tool: Callable[[str, bool], None] = lambda name, ok: None
    # Says a short line to the caller now, while the reply goes on (set by the reply runner): e.g. that a
    # tool is not answering, rather than leaving them in silence.
    say: Callable[[str], None] = lambda text: None
    # A tool that waits on the caller (collecting digits) asks for this many more seconds before the
    # turn's timeout (pipeline.turn_timeout_s) may end it.
    extend_deadline: Callable[[float], None] = lambda seconds: None
    # Say this now, in the reply's voice and order, and return once it has been played (or cut off):
    # for a tool that prompts the caller and then waits for them. Set by the reply that runs the tool.
    speak: Callable[[str], Awaitable[None]] = _say_nothing
    # The call the tool runs in (its session, as the features see it: internal/conversation/state.py), for a
    # tool that keeps or reads something with the call (its slots), or asks how it came (`transport`); None
    # outside a call.
    call: LiveCall | None = None

    def __post_init__(self) -> None:
        # The cascade's responder (internal/pipeline/responder.py) and the Realtime agent still hand the call
        # in `extras["session"]`: it is typed here, once, so that no tool reads extras for it.
        if self.call is None:
            self.call = self.extras.get("session")


ToolHandler = Callable[[dict[str, Any], ToolContext], Awaitable[Any]]


class ToolError(Exception):
    """A tool's own, expected failure; its message goes back to the model."""


class ToolTimeout(ToolError):
    """The tool did not answer in time; counted apart from other failures."""


# (tool, source, outcome, milliseconds) of every run: the server's metrics.
ToolMetrics = Callable[[str, str, str, float], None]


# The status of the work a tool started, by its task id (None: no news).
StatusFunction = Callable[[str], Awaitable[str | None]]
# The same, told the context of the run that asks (the caller's `recall`): for a back end that answers each
# caller about their own work only, and so must be told who asks (an MCP server: internal/tools/mcp.py).
CallerStatusFunction = Callable[[str, ToolContext], Awaitable[str | None]]

Availability = Callable[[ToolContext], bool]
# Told of every tool call run: the call, its context, and its error ("" when it worked).
ToolObserver = Callable[[ToolCall, ToolContext, str], None]
# True, False, or a function of the call's arguments ("read" is harmless, "append" is not).
SideEffects = bool | Callable[[dict[str, Any]], bool]


@dataclass(frozen=True, slots=True)
class _Tool:
    spec: ToolSpec
    handler: ToolHandler
    available: Availability | None = None
    side_effects: SideEffects = True
    ledger: bool = True
    source: str = "builtin"
    untrusted: bool = False
    starts_work: bool = False
    status: CallerStatusFunction | None = None
    slow: bool = False


def _ignoring_context(status: StatusFunction | None) -> CallerStatusFunction | None:
    if status is None:
        return None

    async def asked(task_id: str, context: ToolContext) -> str | None:
        return await status(task_id)
    return asked


class ToolRegistry:
    def __init__(self) -> None:
        self._tools: dict[str, _Tool] = {}
        self._observers: list[ToolObserver] = []
        self.metrics: ToolMetrics | None = None
        self.tracer: trace.Tracer = trace.NoOpTracer()

    def register(self, name: str, description: str, parameters: dict[str, Any], handler: ToolHandler,
                 available: Availability | None = None, side_effects: SideEffects = True,
                 ledger: bool = True, *, source: str = "builtin", untrusted: bool = False,
                 starts_work: bool = False, status: StatusFunction | None = None,
                 caller_status: CallerStatusFunction | None = None, slow: bool = False) -> None:
        """Add a tool; `available(context)` decides per call whether the model is offered it at all.
        `ledger=False`: its runs are not the call's actions to recall (memory writes are audited, a
        transfer records its own outcome, ending the call does nothing for the caller). `source` names
        where it comes from in metrics and traces; `untrusted`: its results are data from outside.
        `starts_work`: a run starts work that goes on elsewhere (its status moves in the caller's task
        ledger); `status(task_id)`: that work's status now ("running", "succeeded", "failed",
        "cancelled"; None: no news), asked when `recall` finds the task open; `caller_status(task_id,
        context)` instead: told the recall's context too (who is asking). `slow`: a run usually takes
        seconds, so the caller hears the thinking cue as soon as the model calls it (internal/pipeline/thinking.py)."""
        if name in self._tools:
            raise ValueError(f"a tool named {name!r} is already registered")
        if status is not None and caller_status is not None:
            raise ValueError(f"tool {name!r}: give status or caller_status, not both")
        self._tools[name] = _Tool(ToolSpec(name, description, parameters), handler, available, side_effects, ledger,
                                  source, untrusted, starts_work, caller_status or _ignoring_context(status), slow)

    def is_slow(self, call: ToolCall) -> bool:
        """Was this tool registered as one that takes seconds?"""
        tool = self._tools.get(call.name)
        return tool is not None and tool.slow

    def task_status(self, name: str, context: ToolContext) -> StatusFunction | None:
        """The status function of a tool that starts work, asked from the run of `context` (the caller's
        recall); None: it has none, or no such tool."""
        tool = self._tools.get(name)
        status = tool.status if tool is not None and tool.starts_work else None
        if status is None:
            return None

        async def asked(task_id: str) -> str | None:
            return await status(task_id, context)
        return asked

    def sources(self) -> dict[str, str]:
        """Every registered tool's name and source, in registration order."""
        return {name: tool.source for name, tool in self._tools.items()}

    def untrusted_offered(self, context: ToolContext | None) -> bool:
        """Is a tool whose results come from outside offered on this call?"""
        return any(tool.untrusted and self._offered(tool, context) for tool in self._tools.values())

    def has_side_effects(self, call: ToolCall) -> bool:
        """Would running this call change anything outside the reply? (An unknown tool does nothing.)"""
        tool = self._tools.get(call.name)
        if tool is None:
            return False
        if callable(tool.side_effects):
            try:
                return bool(tool.side_effects(call.arguments))
            except Exception:
                return True
        return tool.side_effects

    def specs(self, context: ToolContext | None = None) -> list[ToolSpec]:
        return [tool.spec for tool in self._tools.values() if self._offered(tool, context)]

    @staticmethod
    def _offered(tool: _Tool, context: ToolContext | None) -> bool:
        return tool.available is None or (context is not None and tool.available(context))

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    def observe(self, observer: ToolObserver) -> None:
        """Tell `observer` about every call run from now on, with its error ("" when it worked). The
        server's call events use it (server.call_events); an observer that fails is logged and ignored."""
        self._observers.append(observer)

    async def run(self, call: ToolCall, context: ToolContext) -> str:
        """Run one call; the result (or the error) as the text the model reads."""
        text, error = await self._run(call, context)
        for observer in self._observers:
            try:
                observer(call, context, error)
            except Exception:
                log.warning("a tool observer failed", exc_info=True)
        return text

    async def _run(self, call: ToolCall, context: ToolContext) -> tuple[str, str]:
        tool = self._tools.get(call.name)
        if tool is None or not self._offered(tool, context):
            return _error(f"unknown tool {call.name!r}")
        if "_raw" in call.arguments:
            return _error("the arguments were not valid JSON; call the tool again with a JSON object")
        recorded = tool.ledger and self.has_side_effects(call)
        task_id = ""
        if tool.starts_work:
            task_id = new_task_id()
            tasks = context.call.slots.get(CALL_TASKS) if context.call is not None else None
            context = replace(context, extras={**context.extras, "task_id": task_id, "tasks": tasks})
        started = time.monotonic()
        outcome = "cancelled"  # unless it ends otherwise: a barge-in or a hang-up cancels the turn's tools
        error = ""
        with self.tracer.start_as_current_span("tool", attributes={"voicegate.tool": call.name,
                                                                   "voicegate.tool.source": tool.source}) as span:
            try:
                result = await tool.handler(call.arguments, context)
            except ToolError as exc:
                outcome = "timeout" if isinstance(exc, ToolTimeout) else "error"
                text, error = _error(str(exc))
            except Exception as exc:  # a tool bug must not end the turn
                # The type only: an exception's message may quote the arguments, which are never logged.
                log.warning("tool %s failed: %s", call.name, type(exc).__name__)
                outcome = "error"
                text, error = _error(f"the tool failed ({type(exc).__name__})")
            else:
                outcome = "ok"
                text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
                error = _reported_error(result)
            finally:
                ms = (time.monotonic() - started) * 1000.0
                span.set_attribute("voicegate.tool.outcome", outcome)
                self._measure(call.name, tool.source, outcome, ms)
        if task_id and recorded:
            self._started(context, call.name, task_id, ok=outcome == "ok")
        else:
            self._record(context, call.name, recorded, ok=outcome == "ok")
        return text[:MAX_RESULT_CHARS], error

    def _measure(self, name: str, source: str, outcome: str, ms: float) -> None:
        if self.metrics is not None:
            try:
                self.metrics(name, source, outcome, ms)
            except Exception:  # metrics are never a reason to fail a tool
                log.warning("could not count the run of tool %s", name, exc_info=True)

    @staticmethod
    def _started(context: ToolContext, name: str, task_id: str, *, ok: bool) -> None:
        """A tool that starts work: "started" (or "error" when it could not) under its task id."""
        if context.call is not None:
            record_action(context.call.slots, tool_action(name, ok, task_id, started=True))

    @staticmethod
    def _record(context: ToolContext, name: str, recorded: bool, *, ok: bool) -> None:
        if not recorded:
            return
        try:
            context.record_tool(name, ok)
        except Exception:  # the ledger is a note about the call, never a reason to fail a tool
            log.warning("could not record the run of tool %s", name, exc_info=True)


def _error(message: str) -> tuple[str, str]:
    return json.dumps({"error": message}), message


def _reported_error(result: Any) -> str:
    """A tool may report its own failure as a result with an "error" (the memory tool's refused edits)."""
    if isinstance(result, str):
        try:
            result = json.loads(result)
        except ValueError:
            return ""
    if isinstance(result, dict) and result.get("error"):
        return str(result["error"])
    return ""


def register_end_call(registry: ToolRegistry) -> None:
    """`end_call`: the model says goodbye, then the call ends once the farewell has been spoken."""

    async def end_call(arguments: dict[str, Any], context: ToolContext) -> str:
        context.end_call()
        return json.dumps({"ok": True, "note": "The call will end after your reply. Say a short goodbye."})

    registry.register(
        "end_call",
        "End the call after your next reply. Use only when the caller says goodbye or asks to hang up.",
        {"type": "object", "properties": {}, "additionalProperties": False},
        end_call,
        ledger=False,
    )
