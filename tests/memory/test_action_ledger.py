"""What the agent did on a call, recalled later: the actions kept with each session digest (their
objective: bounded, expiring with retention, erased and exported with the caller; their status is the
task ledger's, tests/memory/test_task_ledger.py), and how long digests live."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.memory.conftest import base_config, make_runtime
from tests.memory.test_calls import SAM, agent_lines, call
from tests.pipeline.conftest import ScriptedStt
from tests.tools.test_tool_context import caller_call
from voicegate.internal.config.providers import MemoryConfig
from voicegate.internal.conversation.actions import (
    ACTIONS,
    MAX_ACTIONS,
    call_actions,
    record_action,
    settle_transfer,
    tool_action,
    transfer_action,
)
from voicegate.internal.conversation.slots import Slots
from voicegate.internal.llm.base import ChatMessage, ChatRequest, ReplyDelta, ToolCall, ToolSpec, Turn
from voicegate.internal.llm.local import LocalAgent
from voicegate.internal.memory.outbox import HangupOutbox, HangupWrite
from voicegate.internal.memory.reconcile import SessionDigestRecorder
from voicegate.internal.memory.runtime import DAY_S, FrontendMemoryRuntime
from voicegate.internal.memory.sessions import OWNER, SessionMemory
from voicegate.internal.memory.tool import register_memory_tools
from voicegate.internal.tools.registry import ToolContext, ToolError, ToolRegistry, register_end_call
from voicegate.server.gateway import Gateway

OWNER_KEY = "cd" * 32
TRANSFERRED = {"action": "transfer", "target": "sales", "status": "succeeded"}
BOOKED = {"action": "tool", "name": "book_table", "status": "ok"}


def without(key: str, actions: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{k: v for k, v in action.items() if k != key} for action in actions]


# ---- the ledger itself ---------------------------------------------------------------------------

def test_the_ledger_keeps_the_latest_actions_and_settles_a_transfer() -> None:
    slots = Slots()
    for n in range(MAX_ACTIONS + 5):
        record_action(slots, tool_action(f"tool_{n}", ok=n % 2 == 0))
    record_action(slots, transfer_action("sales"))
    settle_transfer(slots, "sales", "failed")
    ledger = slots.get(ACTIONS, [])
    assert len(ledger) == MAX_ACTIONS and ledger[0]["name"] == "tool_6"
    assert without("task", ledger)[-1] == {"action": "transfer", "target": "sales", "status": "failed"}
    assert len({action["task"] for action in ledger}) == MAX_ACTIONS  # each its own task id


def test_only_well_formed_entries_survive_a_load() -> None:
    loaded = call_actions([BOOKED, {**TRANSFERRED, "note": "the caller's words"}, {"action": "tool", "name": "x"},
                           {"action": "shell", "name": "rm", "status": "ok"}, "text", {"action": "tool",
                           "name": "y", "status": "done"}])
    # {"action": "tool", "name": "x"}: an objective as a session digest keeps it, without its status.
    assert loaded == [BOOKED, TRANSFERRED, {"action": "tool", "name": "x"}]
    assert call_actions(None) == [] and call_actions({"action": "tool"}) == []
    assert len(call_actions([BOOKED] * 50)) == MAX_ACTIONS


async def test_tool_runs_with_side_effects_are_recorded_by_name_and_status_only() -> None:
    async def book(arguments: dict[str, Any], context: ToolContext) -> str:
        return f"booked for {arguments['who']}"

    async def cancel(arguments: dict[str, Any], context: ToolContext) -> str:
        raise ToolError("no such order")

    async def look_up(arguments: dict[str, Any], context: ToolContext) -> str:
        return "open until nine"

    tools = ToolRegistry()
    schema: dict[str, Any] = {"type": "object", "properties": {}}
    tools.register("book_table", "Book.", schema, book)
    tools.register("cancel_order", "Cancel.", schema, cancel)
    tools.register("opening_hours", "Read only.", schema, look_up, side_effects=False)
    tools.register("own_record", "Records itself.", schema, book, ledger=False)
    register_end_call(tools)
    slots = Slots()
    context = ToolContext("s", None, 1, record_tool=lambda name, ok: record_action(slots, tool_action(name, ok)))
    for name in ("book_table", "cancel_order", "opening_hours", "own_record", "end_call", "unknown"):
        await tools.run(ToolCall("c", name, {"who": "Sam Smith, 4111"}), context)
    ledger = slots.get(ACTIONS, [])
    assert without("task", ledger) == [BOOKED, {"action": "tool", "name": "cancel_order", "status": "error"}]
    assert "Sam" not in json.dumps(ledger)  # never the arguments, never the result


async def test_the_local_agent_answers_what_it_did_last_time_from_recall() -> None:
    recall = ToolSpec("recall", "earlier calls", {"type": "object", "properties": {}})

    async def answer(said: str, tools: list[ToolSpec], result: dict[str, Any] | None = None) -> str | ToolCall:
        messages = [ChatMessage("user", said)]
        if result is not None:
            messages += [ChatMessage("assistant", "", tool_calls=[ToolCall("r1", "recall", {})]),
                         ChatMessage("tool", json.dumps(result), tool_call_id="r1")]
        out = [item async for item in LocalAgent().stream(ChatRequest("s", None, "", messages, Turn(text=said),
                                                                      tools=tools))]
        calls = [item for item in out if isinstance(item, ToolCall)]
        return calls[0] if calls else "".join(item.text for item in out if isinstance(item, ReplyDelta))

    asked = await answer("what did you do for me last time", [recall])
    assert isinstance(asked, ToolCall) and asked.name == "recall"
    last = {"calls": [{"date": "2026-11-30", "topics": ["table booking"], "gist": "Booked a table for four",
                       "actions": [BOOKED, TRANSFERRED]}, {"date": "2026-11-01", "topics": [], "gist": "",
                                                           "actions": []}]}
    assert await answer("what did you do for me last time", [recall], last) == (
        "Last time, on November 30, we talked about table booking. My note says: Booked a table for four. "
        "I ran book table, then put you through to sales.")
    quiet = {"calls": [{"date": "2026-11-30", "topics": ["billing"], "gist": "", "actions": []}]}
    assert await answer("What did we talk about last time?", [recall], quiet) == (
        "Last time, on November 30, we talked about billing.")
    assert await answer("what did you do for me last time", [recall], quiet) == (
        "Last time, on November 30, we talked about billing. I didn't do anything for you beyond talking.")
    assert await answer("what did we talk about last time", [recall], {"calls": []}) == (
        "I don't have notes of an earlier call with you.")
    assert await answer("what did we talk about last time", []) == "I don't keep notes of our earlier calls."


# ---- stored with the session digest, on every provider -------------------------------------------

def hangup(actions: list[Any], said: list[str] | None = None) -> HangupWrite:
    return HangupWrite(owner=OWNER_KEY, session_id="s1", transport="sip", epoch=0, steps=["session_digest"],
                       said=["put me through to sales"] if said is None else said, actions=actions)


async def recalled(runtime: FrontendMemoryRuntime, tmp_path: Path) -> list[dict[str, Any]]:
    """The `recall` tool's calls, as the model reads them."""
    tools = ToolRegistry()
    outbox = HangupOutbox(tmp_path / "outbox", retry_max_s=1.0, max_age_s=3600.0, max_entries=10)
    register_memory_tools(tools, runtime, SessionMemory(runtime, "Hello.", outbox), session_digests=True)
    slots = Slots()
    slots.set(OWNER, OWNER_KEY)
    context = ToolContext("s2", None, 1, call=caller_call(SAM, slots))
    calls: list[dict[str, Any]] = json.loads(await tools.run(ToolCall("r", "recall", {}), context))["calls"]
    return calls


def exported_actions(tables: dict[str, list[dict[str, Any]]]) -> list[Any]:
    return [row["actions"] for rows in tables.values() for row in rows if "actions" in row]


DISPATCHED_SALES = {"action": "transfer", "target": "sales", "status": "dispatched"}
DISPATCHED_BOOKING = {"action": "tool", "name": "book_table", "status": "dispatched"}


async def test_recall_returns_what_the_agent_did_and_erasure_takes_it(provider: Any, tmp_path: Path) -> None:
    runtime = make_runtime(provider, tmp_path, session_digests=True)
    junk = {"action": "tool", "name": "charge_card", "status": "ok", "arguments": "4111 1111 1111 1111"}
    await SessionDigestRecorder(runtime, None)(hangup([TRANSFERRED, BOOKED, *[junk] * MAX_ACTIONS]))
    calls = await recalled(runtime, tmp_path)
    assert len(calls) == 1 and len(calls[0]["actions"]) == MAX_ACTIONS  # bounded per call
    await SessionDigestRecorder(runtime, None)(hangup([TRANSFERRED, BOOKED]))
    calls = await recalled(runtime, tmp_path)
    # Digests without task ids (written before the task ledger): what was done, never a frozen status.
    assert calls[0]["actions"] == [DISPATCHED_SALES, DISPATCHED_BOOKING]
    assert "4111" not in json.dumps(calls)  # a stray key never reaches the store

    assert exported_actions(await runtime.export(OWNER_KEY))[-1] == [TRANSFERRED, BOOKED]
    await runtime.delete_owner(OWNER_KEY)
    assert await recalled(runtime, tmp_path) == []
    assert exported_actions(await runtime.export(OWNER_KEY)) == []


async def test_a_digest_and_its_actions_expire_with_the_callers_retention(provider: Any, tmp_path: Path) -> None:
    # Session digests are kept 90 days by default, but this deployment keeps memory one second only.
    runtime = make_runtime(provider, tmp_path, session_digests=True, retention_days=1.0 / 86400)
    recorder = SessionDigestRecorder(runtime, None)
    assert recorder.retention_s == 1.0
    await recorder(hangup([TRANSFERRED]))
    assert [c["actions"] for c in await recalled(runtime, tmp_path)] == [[DISPATCHED_SALES]]
    await asyncio.sleep(1.2)
    assert await recalled(runtime, tmp_path) == []  # expired: never served, even before the sweep
    removed = await runtime.purge_expired()
    assert removed.get("session_digests") == 1
    assert exported_actions(await runtime.export(OWNER_KEY)) == []


def test_session_digests_never_outlive_the_callers_memory() -> None:
    assert MemoryConfig().session_digest_retention_days == 90
    assert MemoryConfig(retention_days=30).session_digest_retention_days == 30
    assert MemoryConfig(digest_retention_days=7).session_digest_retention_days == 7
    assert MemoryConfig(retention_days=30, digest_retention_days=7).session_digest_retention_days == 7


# ---- through the pipeline and the session ---------------------------------------------------------

class BookingAgent:
    """Books a table when asked (a tool with side effects), else the offline agent answers."""

    name = "booking"

    def __init__(self) -> None:
        self.local = LocalAgent()

    async def stream(self, request: ChatRequest) -> AsyncIterator[ReplyDelta | ToolCall]:
        if request.turn.text.startswith("book") or request.turn.text.startswith("cancel"):
            if request.messages[-1].role == "tool":
                yield ReplyDelta("Done.")
            else:
                yield ToolCall("b1", "book_table" if request.turn.text.startswith("book") else "cancel_order",
                               {"what": request.turn.text})
            return
        async for item in self.local.stream(request):
            yield item

    async def complete(self, system: str, user: str, timeout_s: float) -> str:
        return ""

    async def aclose(self) -> None:
        return None


def booking_tools() -> ToolRegistry:
    async def book(arguments: dict[str, Any], context: ToolContext) -> str:
        return "booked"

    async def cancel(arguments: dict[str, Any], context: ToolContext) -> str:
        raise ToolError("nothing to cancel")

    tools = ToolRegistry()
    tools.register("book_table", "Book a table.", {"type": "object", "properties": {}}, book)
    tools.register("cancel_order", "Cancel an order.", {"type": "object", "properties": {}}, cancel)
    return tools


def ledger_config(tmp_path: Path, **memory: Any) -> Any:
    config = base_config(tmp_path)
    config.sip.enabled = False
    config.memory.enabled = True
    config.memory.provider = "memory"
    config.memory.session_digests = True
    for key, value in memory.items():
        setattr(config.memory, key, value)
    return config


async def test_the_next_call_hears_what_the_agent_did_last_time(tmp_path: Path) -> None:
    gateway = Gateway(ledger_config(tmp_path), stt=ScriptedStt([]), tools=booking_tools(), model=BookingAgent())
    await gateway.start()
    try:
        await call(gateway, SAM, "book a table for four on Friday", "cancel my order from Monday",
                   "remember that I like the window seat")
        _, sink = await call(gateway, SAM, "what did you do for me last time")
        assert gateway.memory is not None
        owner = gateway.memory.owner_key(SAM)
        assert owner is not None
        recall_call, booking_call = await gateway.memory.session_digests(owner, 5)
    finally:
        await gateway.stop()
    assert agent_lines(sink)[-1].endswith("I ran book table, then tried cancel order, but it failed.")
    # The memory write is audited, not an action; the tools' arguments are never kept.
    # The digest keeps the objective (with its task id); the status is the task ledger's.
    assert without("task", booking_call.actions) == [{"action": "tool", "name": "book_table"},
                                                     {"action": "tool", "name": "cancel_order"}]
    assert all(action["task"] for action in booking_call.actions)
    assert "Friday" not in json.dumps(booking_call.actions)
    assert recall_call.actions == []  # reading memory is no action


async def test_a_call_where_nothing_was_said_still_records_what_was_done(tmp_path: Path) -> None:
    gateway = Gateway(ledger_config(tmp_path), stt=ScriptedStt([]))
    await gateway.start()
    try:
        assert gateway.sessions is not None and gateway.session_memory is not None and gateway.memory is not None
        session = await gateway.open_session(SAM, "sip")
        record_action(session.slots, transfer_action("sales"))  # e.g. POST /calls/{id}/transfer
        settle_transfer(session.slots, "sales", "succeeded")
        await gateway.sessions.end(session, "transferred")
        await gateway.sessions.drain()
        await gateway.session_memory.drain(10)
        owner = gateway.memory.owner_key(SAM)
        assert owner is not None
        (digest,) = await gateway.memory.session_digests(owner, 5)
        tables = await gateway.memory.export(owner)
    finally:
        await gateway.stop()
    objective = {"action": "transfer", "target": "sales"}
    assert without("task", digest.actions) == [objective] and digest.topics == [] and digest.gist == ""
    (row,) = tables["session_digests"]
    assert without("task", row["actions"]) == [objective]
    (task,) = tables["memory_tasks"]  # the status, live, in the task ledger
    assert task["status"] == "succeeded" and task["task_id"] == digest.actions[0]["task"]


async def test_digests_written_by_the_server_follow_retention_days(tmp_path: Path) -> None:
    gateway = Gateway(ledger_config(tmp_path, retention_days=30, digest_retention_days=90), stt=ScriptedStt([]),
                      tools=booking_tools(), model=BookingAgent())
    await gateway.start()
    try:
        await call(gateway, SAM, "book a table for four on Friday")
        assert gateway.memory is not None
        owner = gateway.memory.owner_key(SAM)
        assert owner is not None
        (row,) = (await gateway.memory.export(owner))["session_digests"]
    finally:
        await gateway.stop()
    assert without("task", row["actions"]) == [{"action": "tool", "name": "book_table"}]
    assert abs((row["expires_at"] - row["created_at"]) - 30 * DAY_S) < 60


async def test_without_session_digests_nothing_of_the_ledger_is_kept(tmp_path: Path) -> None:
    gateway = Gateway(ledger_config(tmp_path, session_digests=False), stt=ScriptedStt([]))
    await gateway.start()
    try:
        assert gateway.session_memory is not None and gateway.memory is not None
        session = await gateway.open_session(SAM, "talk")
        session.conversation.transcript.add("user", "book a table")
        record_action(session.slots, tool_action("book_table", ok=True))
        owner = gateway.memory.owner_key(SAM)
        assert owner is not None
        entry = gateway.session_memory.hangup_write(session, owner, 0)
        await gateway.sessions.end(session, "caller hung up")  # type: ignore[union-attr]
        await gateway.sessions.drain()  # type: ignore[union-attr]
        await gateway.session_memory.drain(10)
        tables = await gateway.memory.export(owner)
    finally:
        await gateway.stop()
    assert entry is not None and entry.actions == []
    assert tables["memory_tasks"] == []  # nor any status in the task ledger
