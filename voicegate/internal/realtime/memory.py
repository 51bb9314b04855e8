"""Caller memory and tools on a Realtime call: the session's instructions, its functions, their runs.

A Realtime model holds its instructions and its tools for the whole session (`session.update`), not per
turn as the cascade's requests do, so the same parts are put together once at the start and again at
each idle point (`LiveInstructions`):

- The instructions are the cascade's system context for the call (internal/pipeline/context.py): the
  policy, the caller's memory fenced and bounded as the cascade injects it (only the caller's own; an
  anonymous caller has none), the tool-results rule when tools from outside are offered, the assistant
  profile, skills and the rolling summary; then a short note for a model that hears and speaks.
- An edit made elsewhere (the HTTP API, the panel, the CLI, another node) marks the call's memory
  changed; at the next idle point `services.before_turn` projects it again (internal/memory/sessions.py),
  the instructions are rebuilt, and when they differ the pipeline sends them in a `session.update` on
  the same connection: a deleted fact is gone from what the model holds (the seeds' memory contract).
- The functions are the call's tools ([mcp] servers, transfer, memory, recall, end_call, ...) in
  Realtime's function shape, minus the ones that cannot work on a Realtime call (`REALTIME_UNSUPPORTED`).
- A response that ends with several function calls has them all run here, in order, one at a time
  (each memory write starts from the latest document, so two appends in one turn both land), each with
  its output text; a failing tool gives its error text, never an exception. The pipeline then sends one
  `response.create`: several calls in one turn, one follow-up response.

Per-turn parts of the cascade's request have no place in a session's instructions: knowledge retrieved
for a turn's words, memory injection = "retrieval" (the snapshot is used), the note for a garbled turn.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from voicegate.internal.conversation.actions import record_action, tool_action
from voicegate.internal.conversation.state import CallContext
from voicegate.internal.llm.base import ToolCall, ToolSpec
from voicegate.internal.pipeline.context import build_system_context
from voicegate.internal.pipeline.services import PipelineServices
from voicegate.internal.tools.registry import ToolContext

log = logging.getLogger(__name__)

# Tools that cannot work on a Realtime call, never offered to its model (the registry keeps them for the
# cascade):
# - collect_digits runs a digit form through the cascade's own ears: it takes the pipeline's caller input
#   (internal/pipeline/capture.py) so that the local recogniser's finals and the keys reach the form instead
#   of a turn, and speaks its prompts in order within the reply that called it (ToolContext.speak). On a
#   Realtime call the model hears the caller itself and answers on its own: the digits would be a turn the
#   model answers while the form waits, and a sensitive form's spoken entry (a PIN, a card) would reach
#   the model in the clear, which the form exists to prevent. Keys pressed still reach the model as text.
REALTIME_UNSUPPORTED: dict[str, str] = {
    "collect_digits": "digit forms need the cascade's recogniser and turn-taking; keypad keys reach the "
                      "Realtime model as text instead",
}

# What a model that hears and speaks is told beyond the cascade's policy: how keys reach it (the pipeline
# sends them as this text), and that its memory sections are live, so a fact removed from them during the
# call is no longer saved whatever the conversation said earlier (the seeds: "deleted facts must not remain
# in the model's saved-memory snapshot").
REALTIME_NOTE = """## On this call
- You hear the caller and answer in speech. Keys the caller presses on their keypad reach you as text
  such as "[The caller pressed keypad keys: 1 2 3]".
- These instructions may be updated during the call. The caller memory sections say what is saved about
  the caller now: a fact that is no longer in them was deleted, so never state it as remembered or saved,
  even if it came up earlier in this conversation."""


def tool_context(session: CallContext, turn: int, end_call: Callable[[], None], heard: str = "", *,
                 say: Callable[[str], None] | None = None) -> ToolContext:
    """The ToolContext the cascade's responder builds for a turn (internal/pipeline/responder.py): the
    session and the other side's words this turn (`heard`: send_dtmf is offered when they ask for keys) as
    extras, and the call's ledger of actions as `record_tool`, so MCP tools, transfer, the memory tool and
    recall behave the same. `say`: a short line spoken while a tool runs (an MCP tool's timeout notice)."""
    slots = session.slots
    context = ToolContext(session.id, session.resource_id, turn, end_call,
                          extras={"session": session, "heard": heard},
                          record_tool=lambda name, ok: record_action(slots, tool_action(name, ok)))
    if say is not None:
        context.say = say
    return context


def realtime_function(spec: ToolSpec) -> dict[str, Any]:
    """One tool as a Realtime session's function definition (flat: no nested "function" object)."""
    return {"type": "function", "name": spec.name, "description": spec.description, "parameters": spec.parameters}


def offered_on_realtime(name: str) -> bool:
    return name not in REALTIME_UNSUPPORTED


def function_tools(services: PipelineServices, context: ToolContext) -> list[dict[str, Any]]:
    """The functions offered on this call (each tool's own availability, as the cascade offers them),
    less those that cannot work on a Realtime call (REALTIME_UNSUPPORTED), in registration order."""
    return [realtime_function(spec) for spec in services.tools.specs(context) if offered_on_realtime(spec.name)]


def instructions(session: CallContext, services: PipelineServices, context: ToolContext) -> str:
    """The session's instructions: the cascade's system context for this call (its memory as projected
    now, the rolling summary, the tool-results rule when outside tools are offered), then REALTIME_NOTE."""
    layers = services.context(session)
    system = build_system_context(layers, summary=session.conversation.summary.text,
                                  outside_tools=services.tools.untrusted_offered(context))
    return system + "\n\n" + REALTIME_NOTE


def parse_arguments(text: str) -> dict[str, Any]:
    """A function call's arguments as a dict; anything else as {"_raw": text}, which the registry answers
    with "not valid JSON, call again" (as the cascade's model client does)."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_raw": text}


def function_calls(response: dict[str, Any]) -> list[ToolCall]:
    """The function calls of a `response.done` event's `response`, in order (each `call_id` as its id)."""
    calls = []
    for item in response.get("output") or []:
        if isinstance(item, dict) and item.get("type") == "function_call":
            arguments = item.get("arguments")
            calls.append(ToolCall(str(item.get("call_id") or item.get("id") or ""), str(item.get("name") or ""),
                                  parse_arguments(arguments if isinstance(arguments, str) else "")))
    return calls


def _error_output(message: str) -> str:
    return json.dumps({"error": message})


async def run_function_calls(services: PipelineServices, calls: list[ToolCall],
                             context: ToolContext) -> list[tuple[str, str]]:
    """Run every call, in order, one at a time (so each memory write starts from the document the one
    before it left); (call_id, output text) for each. A tool that fails, is unknown or is not offered on
    a Realtime call gives an error output the model can act on; nothing raises but a cancellation."""
    outputs: list[tuple[str, str]] = []
    for call in calls:
        if not offered_on_realtime(call.name):
            outputs.append((call.id, _error_output(f"{call.name} is not available on this call: "
                                                   f"{REALTIME_UNSUPPORTED[call.name]}")))
            continue
        try:
            text = await services.tools.run(call, context)
        except Exception as exc:  # the registry answers a tool's own failures; anything else is ours
            log.warning("function call %s failed: %s", call.name, type(exc).__name__)
            text = _error_output(f"the tool failed ({type(exc).__name__})")
        outputs.append((call.id, text))
    return outputs


class LiveInstructions:
    """The session's instructions as the model holds them: `initial()` at the start, then at each idle
    point `at_idle()` gives new text only when something changed (memory edited elsewhere, the rolling
    summary, a tool write of this call), so the pipeline sends a `session.update` only then."""

    def __init__(self, session: CallContext, services: PipelineServices, context: Callable[[], ToolContext]) -> None:
        self._session = session
        self._services = services
        self._context = context
        self.sent = ""  # the instructions the model was last sent

    def current(self) -> str:
        return instructions(self._session, self._services, self._context())

    def initial(self) -> str:
        self.sent = self.current()
        return self.sent

    async def at_idle(self) -> str | None:
        # The cascade's idle point: picks up memory changed by the API, the panel, the CLI or another node.
        await self._services.before_turn(self._session)
        text = self.current()
        if text == self.sent:
            return None
        self.sent = text
        return text
