"""An MCP tool that starts work (`task_tools`) goes to the caller's task ledger: the server gets
the ledger's task id (the model never sees that argument), the run is `started`, and the caller's `recall`
asks the server's status tool and reads the answer live. A real MCP server process over stdio."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes.openai_fake import FakeOpenAI
from tests.pipeline.conftest import ScriptedStt
from tests.tools.test_mcp import mcp_config, one_turn, stdio_server, tool_messages
from tests.tools.test_tool_context import caller_call
from voicegate.internal.conversation.slots import Slots
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.llm.base import ToolCall
from voicegate.internal.memory.sessions import EPOCH, OWNER
from voicegate.internal.tools.registry import ToolContext
from voicegate.server.gateway import Gateway

ALICE = CallerIdentity("jwt", "alice")


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key="sk-test") as server:
        yield server


async def test_a_task_tool_is_started_in_the_ledger_and_recall_asks_its_status_tool(tmp_path: Path,
                                                                                    fake: FakeOpenAI) -> None:
    calls = tmp_path / "calls.jsonl"
    config = mcp_config(tmp_path, fake, [stdio_server(calls, tools=["open_ticket", "ticket_status"],
                                                      task_tools={"open_ticket": "ticket_status"})])
    config.memory.enabled, config.memory.provider, config.memory.session_digests = True, "memory", True
    config.memory.auto = False
    gateway = Gateway(config, stt=ScriptedStt([]))
    await gateway.start()
    try:
        fake.script_tool_call("orders__open_ticket", {"subject": "boiler broken"})
        fake.script_reply("I opened a ticket.")
        await one_turn(gateway, "please open a ticket for my broken boiler")
        assert gateway.sessions is not None and gateway.session_memory is not None and gateway.memory is not None
        await gateway.sessions.drain()
        await gateway.session_memory.drain(30)
        shown = [tool for tool in fake.requests[0]["tools"] if tool["function"]["name"] == "orders__open_ticket"]
        owner = gateway.memory.owner_key(ALICE)
        assert owner is not None
        (digest,) = await gateway.memory.session_digests(owner, 5)
        (action,) = digest.actions
        before = (await gateway.memory.tasks(owner, [action["task"]]))[action["task"]].status
        slots = Slots()
        slots.set(OWNER, owner)
        slots.set(EPOCH, await gateway.memory.epoch(owner))
        context = ToolContext("x", None, 1, call=caller_call(ALICE, slots))
        recalled = json.loads(await gateway.tools.run(ToolCall("r", "recall", {}), context))["calls"]
        after = (await gateway.memory.tasks(owner, [action["task"]]))[action["task"]].status
    finally:
        await gateway.stop()
    assert "voicegate_task_id" not in json.dumps(shown[0]["function"]["parameters"])  # never the model's to fill
    reached = [json.loads(line) for line in calls.read_text().splitlines()]
    assert reached[0] == {"tool": "open_ticket", "arguments": {"subject": "boiler broken",
                                                               "voicegate_task_id": action["task"]}}
    assert action == {"action": "tool", "name": "orders__open_ticket", "task": action["task"]}  # the objective
    assert before == "started"
    assert recalled[0]["actions"][0]["status"] == "succeeded" and after == "succeeded"  # asked, and kept
    assert reached[-1] == {"tool": "ticket_status", "arguments": {"task_id": action["task"]}}


@pytest.mark.parametrize("caller_id", ["opaque", "raw"])
async def test_a_status_call_tells_the_server_the_same_caller_so_a_server_that_requires_one_answers_it(
        tmp_path: Path, fake: FakeOpenAI, caller_id: str) -> None:
    """The status tool is asked with the caller in `_meta`, in the server's caller_id format,
    the same as the call that started the work; a server that refuses calls without one (and answers
    a ticket's status to its opener only) lets the task reach its end in the ledger."""
    calls = tmp_path / "calls.jsonl"
    server = stdio_server(calls, tools=["open_ticket", "ticket_status"], task_tools={"open_ticket": "ticket_status"},
                          caller_id=caller_id)
    server["env"]["MCP_TEST_REQUIRE_CALLER"] = "1"
    config = mcp_config(tmp_path, fake, [server])
    config.memory.enabled, config.memory.provider, config.memory.session_digests = True, "memory", True
    config.memory.auto = False
    gateway = Gateway(config, stt=ScriptedStt([]))
    await gateway.start()
    try:
        fake.script_tool_call("orders__open_ticket", {"subject": "boiler broken"})
        fake.script_reply("I opened a ticket.")
        await one_turn(gateway, "please open a ticket for my broken boiler", caller=ALICE)
        assert gateway.sessions is not None and gateway.session_memory is not None and gateway.memory is not None
        await gateway.sessions.drain()
        await gateway.session_memory.drain(30)
        owner = gateway.memory.owner_key(ALICE)
        assert owner is not None
        (digest,) = await gateway.memory.session_digests(owner, 5)
        task = digest.actions[0]["task"]
        before = (await gateway.memory.tasks(owner, [task]))[task].status
        fake.script_tool_call("recall", {})  # a later call of the same caller: "how is my ticket doing?"
        fake.script_reply("Your ticket is done.")
        await one_turn(gateway, "how is my ticket doing?", caller=ALICE)
        after = (await gateway.memory.tasks(owner, [task]))[task].status
    finally:
        await gateway.stop()
    opened, asked = (json.loads(line)["caller"] for line in Path(str(calls) + ".callers").read_text().splitlines())
    assert before == "started" and after == "succeeded"  # the server answered the status call
    assert opened["id"] and opened["id_format"] == caller_id
    assert asked == opened  # the status call carries the caller, as the call that started the work did
    recalled = next(json.loads(message)["calls"] for request in fake.requests for message in tool_messages(request)
                    if '"calls"' in message)
    assert recalled[0]["actions"][0]["status"] == "succeeded"  # what the model was told
