"""A tool reaches the call it runs in through its context's typed `call` (a LiveCall: a Session is one), not
through an untyped `extras` entry and getattr; the recording tool and a task tool read the call's slots by it."""

from __future__ import annotations

import json
from typing import Any

from voicegate.internal.conversation.actions import CALL_TASKS
from voicegate.internal.conversation.rolling_summary import RollingSummary
from voicegate.internal.conversation.slots import Slots
from voicegate.internal.conversation.state import Conversation, LiveCall
from voicegate.internal.event_envelope import NullSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.llm.base import ToolCall
from voicegate.internal.session import Session
from voicegate.internal.tools.registry import ToolContext, ToolRegistry


def a_call(transport: str = "sip", identity: CallerIdentity | None = None) -> Session:
    """A live call's session, as a transport opens one (the conversation's summary never asks a model here)."""
    return Session(identity or CallerIdentity("sip", "+15551234567"), transport,  # type: ignore[arg-type]
                   Conversation(RollingSummary(None, 1.0)))


def caller_call(identity: CallerIdentity, slots: Slots) -> Session:
    """A live call of `identity` whose features have kept `slots` (memory's owner and epoch, say)."""
    session = a_call("webrtc", identity)
    session.slots = slots
    return session


def test_a_session_is_the_live_call_features_see() -> None:
    session = a_call()
    call: LiveCall = session  # what memory, recording and the phone flows are given
    assert call.transport == "sip" and call.sample_rate == 0 and isinstance(call.events, NullSink)


async def test_a_tool_finds_its_call_in_its_context() -> None:
    session = a_call("webrtc")
    seen: list[Any] = []

    async def which_call(arguments: dict[str, Any], context: ToolContext) -> str:
        seen.append(context.call)
        return json.dumps({"transport": context.call.transport if context.call is not None else None})

    registry = ToolRegistry()
    registry.register("which_call", "says how the call came", {"type": "object", "properties": {}}, which_call,
                      side_effects=False)
    typed = ToolContext(session.id, None, 1, call=session)
    assert json.loads(await registry.run(ToolCall("1", "which_call", {}), typed)) == {"transport": "webrtc"}
    # a context built by a caller that still hands the session in `extras` gets the same typed call
    handed = ToolContext(session.id, None, 1, extras={"session": session})
    assert handed.call is session
    assert json.loads(await registry.run(ToolCall("2", "which_call", {}), handed)) == {"transport": "webrtc"}
    assert seen == [session, session]
    outside = ToolContext("none", None, 1)
    assert outside.call is None


async def test_a_task_tool_reports_to_the_calls_tasks_through_the_typed_call() -> None:
    session = a_call()
    received: list[Any] = []

    async def start_work(arguments: dict[str, Any], context: ToolContext) -> str:
        received.append((context.extras.get("task_id"), context.extras.get("tasks")))
        return "{}"

    tasks = object()
    session.slots.set(CALL_TASKS, tasks)  # type: ignore[arg-type]
    registry = ToolRegistry()
    registry.register("start_work", "starts a job", {"type": "object", "properties": {}}, start_work,
                      starts_work=True)
    await registry.run(ToolCall("1", "start_work", {}), ToolContext(session.id, None, 1, call=session))
    assert received and received[0][0] and received[0][1] is tasks
