"""Tools the model can call: a registry the model sees as OpenAI function definitions.

A tool is a plain async Python function registered at the composition root. Whatever it raises goes
back to the model as a tool result (`{"error": ...}`), never out of the turn: a broken tool is
something the model can apologise for, not a dropped call.

A tool says whether a call of it changes anything outside the reply (`side_effects`: memory writes,
transfers, ending the call). A reply prepared before the caller's turn is over may be thrown away, so
it runs only the tools without side effects until the turn is released (internal/pipeline/responder.py).
Unknown is treated as "has side effects". A run of a tool with side effects is told to the call's
ledger of what the agent did (`ToolContext.record_tool`: the tool's name and whether it worked, never
its arguments or result), unless the tool keeps its own record (`ledger=False`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from internal.llm.base import ToolCall, ToolSpec

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
    # A tool that waits on the caller (collecting digits) asks for this many more seconds before the
    # turn's timeout (pipeline.turn_timeout_s) may end it.
    extend_deadline: Callable[[float], None] = lambda seconds: None
    # Say this now, in the reply's voice and order, and return once it has been played (or cut off):
    # for a tool that prompts the caller and then waits for them. Set by the reply that runs the tool.
    speak: Callable[[str], Awaitable[None]] = _say_nothing


ToolHandler = Callable[[dict[str, Any], ToolContext], Awaitable[Any]]


class ToolError(Exception):
    """A tool's own, expected failure; its message goes back to the model."""


Availability = Callable[[ToolContext], bool]
# True, False, or a function of the call's arguments ("read" is harmless, "append" is not).
SideEffects = bool | Callable[[dict[str, Any]], bool]


@dataclass(frozen=True, slots=True)
class _Tool:
    spec: ToolSpec
    handler: ToolHandler
    available: Availability | None = None
    side_effects: SideEffects = True
    ledger: bool = True


class ToolRegistry:
    def __init__(self) -> None:
        self._tools: dict[str, _Tool] = {}

    def register(self, name: str, description: str, parameters: dict[str, Any], handler: ToolHandler,
                 available: Availability | None = None, side_effects: SideEffects = True,
                 ledger: bool = True) -> None:
        """Add a tool; `available(context)` decides per call whether the model is offered it at all.
        `ledger=False`: its runs are not the call's actions to recall (memory writes are audited, a
        transfer records its own outcome, ending the call does nothing for the caller)."""
        if name in self._tools:
            raise ValueError(f"a tool named {name!r} is already registered")
        self._tools[name] = _Tool(ToolSpec(name, description, parameters), handler, available, side_effects, ledger)

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

    async def run(self, call: ToolCall, context: ToolContext) -> str:
        """Run one call; the result (or the error) as the text the model reads."""
        tool = self._tools.get(call.name)
        if tool is None or not self._offered(tool, context):
            return json.dumps({"error": f"unknown tool {call.name!r}"})
        if "_raw" in call.arguments:
            return json.dumps({"error": "the arguments were not valid JSON; call the tool again with a JSON object"})
        recorded = tool.ledger and self.has_side_effects(call)
        try:
            result = await tool.handler(call.arguments, context)
        except ToolError as exc:
            self._record(context, call.name, recorded, ok=False)
            return json.dumps({"error": str(exc)})
        except Exception as exc:  # a tool bug must not end the turn
            log.warning("tool %s failed", call.name, exc_info=exc)
            self._record(context, call.name, recorded, ok=False)
            return json.dumps({"error": f"the tool failed ({type(exc).__name__})"})
        self._record(context, call.name, recorded, ok=True)
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
        return text[:MAX_RESULT_CHARS]

    @staticmethod
    def _record(context: ToolContext, name: str, recorded: bool, *, ok: bool) -> None:
        if not recorded:
            return
        try:
            context.record_tool(name, ok)
        except Exception:  # the ledger is a note about the call, never a reason to fail a tool
            log.warning("could not record the run of tool %s", name, exc_info=True)


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
