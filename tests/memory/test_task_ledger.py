"""The task ledger (seed 004): a session digest keeps what was dispatched, the status is read
live from the ledger when the caller asks; finished entries are kept `task_terminal_days`, then the
work is reported as dispatched without a status; bounded per caller, erased and exported with the
caller, never a tool's arguments or result."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.memory.conftest import make_runtime
from tests.memory.test_action_ledger import OWNER_KEY, hangup, ledger_config, recalled
from tests.memory.test_calls import SAM, agent_lines, call
from tests.pipeline.conftest import ScriptedStt
from tests.tools.test_tool_context import caller_call
from voicegate.internal.conversation.actions import record_action, transfer_action
from voicegate.internal.conversation.slots import Slots
from voicegate.internal.llm.base import ChatRequest, ReplyDelta, ToolCall
from voicegate.internal.memory.reconcile import SessionDigestRecorder
from voicegate.internal.memory.sessions import EPOCH, OWNER
from voicegate.internal.memory.tasks import TaskEntry
from voicegate.internal.tools.registry import ToolContext, ToolRegistry
from voicegate.server.gateway import Gateway

SECRET_ARGUMENT = "deliver to 12 Quokka Lane"


class PartsAgent:
    """Orders parts when asked (a tool that starts work), else recalls."""

    name = "parts"

    def __init__(self) -> None:
        from voicegate.internal.llm.local import LocalAgent

        self.local = LocalAgent()

    async def stream(self, request: ChatRequest) -> AsyncIterator[ReplyDelta | ToolCall]:
        if request.turn.text.startswith("order"):
            if request.messages[-1].role == "tool":
                yield ReplyDelta("Ordered.")
            else:
                yield ToolCall("o1", "order_parts", {"address": SECRET_ARGUMENT})
            return
        async for item in self.local.stream(request):
            yield item

    async def complete(self, system: str, user: str, timeout_s: float) -> str:
        return ""

    async def aclose(self) -> None:
        return None


class PartsSupplier:
    """A deployer's plug-in: starts an order elsewhere, keeps the call's task handle, reports later."""

    def __init__(self) -> None:
        self.handles: list[tuple[Any, str]] = []
        self.remote: dict[str, str] = {}  # what the supplier's own system says, by our task id

    def register(self, tools: ToolRegistry) -> None:
        async def order(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
            self.handles.append((context.extras["tasks"], context.extras["task_id"]))
            return {"order": "PO-77", "address": arguments["address"]}

        async def status(task_id: str) -> str | None:
            return self.remote.get(task_id)

        tools.register("order_parts", "Order parts.", {"type": "object", "properties": {}}, order,
                       starts_work=True, status=status)


async def recalled_actions(gateway: Gateway, owner: str) -> list[dict[str, Any]]:
    """The `recall` tool's actions of the latest call that did something, as the model reads them."""
    assert gateway.memory is not None
    slots = Slots()  # as a live call of the caller has them
    slots.set(OWNER, owner)
    slots.set(EPOCH, await gateway.memory.epoch(owner))
    context = ToolContext("x", None, 1, call=caller_call(SAM, slots))
    calls = json.loads(await gateway.tools.run(ToolCall("r", "recall", {}), context))["calls"]
    return next(c["actions"] for c in calls if c["actions"])  # type: ignore[no-any-return]


async def test_status_moves_after_the_call_and_recall_reads_it_live(tmp_path: Path) -> None:
    supplier = PartsSupplier()
    tools = ToolRegistry()
    supplier.register(tools)
    gateway = Gateway(ledger_config(tmp_path), stt=ScriptedStt([]), tools=tools, model=PartsAgent())
    await gateway.start()
    try:
        assert gateway.memory is not None and gateway.sessions is not None and gateway.session_memory is not None
        owner = gateway.memory.owner_key(SAM)
        assert owner is not None
        # A call that asked for a transfer still waiting for its outcome when the call ended, then a call
        # that ordered parts (work that goes on elsewhere).
        session = await gateway.open_session(SAM, "sip")
        session.conversation.transcript.add("user", "put me through to sales")
        record_action(session.slots, transfer_action("sales"))
        await gateway.sessions.end(session, "caller hung up")
        await gateway.sessions.drain()
        await gateway.session_memory.drain(10)
        assert [a["status"] for a in await recalled_actions(gateway, owner)] == ["ended"]
        await call(gateway, SAM, "order the parts for my boiler")
        (handle, task_id), = supplier.handles
        assert [a["status"] for a in await recalled_actions(gateway, owner)] == ["started"]
        # After the call, the supplier's system reports progress: recall asks it, the ledger keeps it.
        supplier.remote[task_id] = "running"
        assert [a["status"] for a in await recalled_actions(gateway, owner)] == ["running"]
        assert (await gateway.memory.tasks(owner, [task_id]))[task_id].status == "running"
        # The plug-in tells the ledger itself when the order arrived (no free text: a fixed vocabulary).
        assert await handle.update(task_id, "succeeded", name="order_parts")
        assert not await handle.update(task_id, "shipped to Quokka Lane", name="order_parts")
        supplier.remote.clear()
        _, sink = await call(gateway, SAM, "what did you do for me last time")
        tables = await gateway.memory.export(owner)
    finally:
        await gateway.stop()
    assert agent_lines(sink)[-1].endswith("I ran order parts, and it has finished.")
    statuses = {row["name"]: row["status"] for row in tables["memory_tasks"]}
    assert statuses == {"sales": "ended", "order_parts": "succeeded"}  # the transfer never learnt its outcome
    stored = json.dumps(tables, default=str)
    assert "Quokka" not in stored and "PO-77" not in stored  # never the arguments, never the result


async def test_finished_work_keeps_its_status_for_task_terminal_days_then_is_dispatched(
        provider: Any, tmp_path: Path) -> None:
    runtime = make_runtime(provider, tmp_path, session_digests=True, task_terminal_days=1.5 / 86400, max_tasks=3)
    done = {"action": "transfer", "target": "sales", "task": "a1"}
    open_work = {"action": "tool", "name": "order_parts", "task": "b2"}
    await SessionDigestRecorder(runtime, None)(hangup([done, open_work]))
    keeps = await runtime.record_task(OWNER_KEY, TaskEntry("a1", "transfer", "sales", "requested", "s1"), 0)
    await runtime.record_task(OWNER_KEY, TaskEntry("b2", "tool", "order_parts", "started", "s1"), 0)
    if not keeps:  # a provider without a ledger (Markdown): never a status it cannot keep live
        assert [a["status"] for a in (await recalled(runtime, tmp_path))[0]["actions"]] == ["dispatched"] * 2
        return
    assert [a["status"] for a in (await recalled(runtime, tmp_path))[0]["actions"]] == ["requested", "started"]
    await runtime.record_task(OWNER_KEY, TaskEntry("a1", "transfer", "sales", "succeeded", "s1"), 0)
    assert [a["status"] for a in (await recalled(runtime, tmp_path))[0]["actions"]] == ["succeeded", "started"]
    await asyncio.sleep(2.0)
    # Finished longer ago than task_terminal_days: dispatched, without a status; open work still shows.
    assert [a["status"] for a in (await recalled(runtime, tmp_path))[0]["actions"]] == ["dispatched", "started"]
    assert (await runtime.purge_expired()).get("memory_tasks") == 1

    for n in range(5):  # bounded per caller: the oldest go
        await runtime.record_task(OWNER_KEY, TaskEntry(f"c{n}", "tool", "book_table", "ok", "s2"), 0)
        await asyncio.sleep(0.01)
    rows = (await runtime.export(OWNER_KEY))["memory_tasks"]
    assert sorted(row["task_id"] for row in rows) == ["c2", "c3", "c4"]
    removed = await runtime.delete_owner(OWNER_KEY)
    assert removed["memory_tasks"] == 3
    assert (await runtime.export(OWNER_KEY))["memory_tasks"] == []
    # A write begun before the erasure (its epoch is 0) cannot bring an entry back.
    try:
        await runtime.record_task(OWNER_KEY, TaskEntry("d1", "tool", "book_table", "ok", "s3"), 0)
    except Exception as exc:
        assert type(exc).__name__ == "CallerErased"
    else:
        raise AssertionError("a ledger write from before the erasure landed")
