"""What the model is asked for one caller turn: the system context's layers, the history, the turn.

Reading only: the rolling summary may start a refresh in the background and the memory snapshot may be
refreshed (an idle point), but nothing here writes the conversation, so a reply prepared before its turn
was over can be thrown away without a trace.
"""

from __future__ import annotations

from voicegate.internal.conversation.state import CallContext
from voicegate.internal.llm.base import ChatMessage, ChatRequest, Turn
from voicegate.internal.pipeline.context import build_system_context
from voicegate.internal.pipeline.record import INTERRUPTED_TEXT
from voicegate.internal.pipeline.services import PipelineServices
from voicegate.internal.tools.registry import ToolContext


async def build_request(session: CallContext, services: PipelineServices, turn: Turn, user_text: str,
                        tool_context: ToolContext) -> ChatRequest:
    """The request for `turn` (its summary, knowledge, memory and interrupted text are filled in)."""
    conversation = session.conversation
    conversation.summary.maybe_refresh(conversation.transcript.entries())
    with services.tracer.start_as_current_span("memory.refresh"):
        await services.before_turn(session)
    turn.summary = conversation.summary.text
    if services.retrieve is not None and turn.text:
        with services.tracer.start_as_current_span("retrieval"):
            turn.context = await services.retrieve(session, turn.text)
    layers = services.context(session)
    if services.turn_memory is not None and turn.text:
        with services.tracer.start_as_current_span("memory.read"):
            relevant = await services.turn_memory(session, turn.text)
        if relevant is not None:
            layers.memory_context, layers.memory_text = relevant
    turn.memory = layers.memory_text
    turn.interrupted_text = session.slots.get(INTERRUPTED_TEXT, "")
    tools = services.tools
    return ChatRequest(
        session_id=session.id,
        resource_id=session.resource_id,
        system=build_system_context(layers, summary=turn.summary, knowledge=turn.context, note=turn.note,
                                    outside_tools=tools.untrusted_offered(tool_context)),
        messages=conversation.recent_history(ChatMessage("user", user_text)),
        turn=turn,
        tools=tools.specs(tool_context),
        agent_system=layers.skills,
    )
