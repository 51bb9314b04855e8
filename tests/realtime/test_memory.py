"""Caller memory and tools for the Realtime agent (internal/realtime/memory.py), against the real memory
runtime on real PostgreSQL behind a real Gateway: the session's instructions, its functions, a batch of
function calls, and the idle-point refresh after an edit made by another process (the CLI)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.memory.processes import render_toml, wait_until
from tests.memory.test_calls import OTHER, SAM, documents, memory_config
from tests.pipeline.conftest import ScriptedStt
from voicegate.internal.conversation.actions import ACTIONS
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.llm.base import ToolCall
from voicegate.internal.memory.provider import ChangeContext
from voicegate.internal.memory.tool import MEMORY_TOOL_PARAMETERS
from voicegate.internal.pipeline.context import MEMORY_POLICY, TOOL_RESULTS_POLICY
from voicegate.internal.pipeline.services import PipelineServices
from voicegate.internal.realtime.memory import (
    REALTIME_NOTE,
    LiveInstructions,
    function_calls,
    function_tools,
    instructions,
    run_function_calls,
    tool_context,
)
from voicegate.internal.session import Session
from voicegate.internal.tools.registry import ToolContext
from voicegate.server.gateway import Gateway

SECRET = "owner-key-secret-for-the-realtime-memory-tests"
NAME = "- The caller's name is Sam."
BEES = "- The caller keeps bees."
ANONYMOUS = CallerIdentity.anonymous("withheld")
MCP_SERVER = Path(__file__).parents[1] / "tools" / "mcp_server.py"


@pytest.fixture
async def gateway(tmp_path: Path, fresh_db: str) -> AsyncIterator[Gateway]:
    config = memory_config(tmp_path, fresh_db, owner_key_secret=SECRET)
    config.digits.enabled = True  # collect_digits registered: the cascade offers it, a Realtime call must not
    started = Gateway(config, stt=ScriptedStt([]))
    await started.start()
    yield started
    await started.stop()


def services(gateway: Gateway) -> PipelineServices:
    assert gateway.services is not None, "the gateway is not started"
    return gateway.services


async def remember(gateway: Gateway, identity: CallerIdentity, line: str) -> None:
    assert gateway.memory is not None
    owner = gateway.memory.owner_key(identity)
    assert owner is not None
    await gateway.memory.edit(owner, "memory", "append", content=line, context=ChangeContext("api"))


async def opened(gateway: Gateway, identity: CallerIdentity, transport: str = "talk") -> tuple[Session, ToolContext]:
    session = await gateway.open_session(identity, transport)  # type: ignore[arg-type]
    return session, tool_context(session, 1, lambda: None)


async def ended(gateway: Gateway, *sessions: Session) -> None:
    assert gateway.sessions is not None
    for session in sessions:
        await gateway.sessions.end(session, "test over")
    await gateway.sessions.drain()


def fenced(text: str, tag: str) -> str:
    """What the instructions hold inside the fence <tag> ("" when none): the fence's tags stand on lines of
    their own (the policy names them too, in its text)."""
    opening, closing = f"\n<{tag}>\n", f"\n</{tag}>"
    return text.split(opening, 1)[1].split(closing, 1)[0] if opening in text else ""


async def test_the_instructions_hold_the_callers_own_memory_fenced_as_the_cascades(gateway: Gateway) -> None:
    await remember(gateway, SAM, NAME)
    await remember(gateway, OTHER, BEES)
    sam, sam_tools = await opened(gateway, SAM)
    other, other_tools = await opened(gateway, OTHER)
    anonymous, anonymous_tools = await opened(gateway, ANONYMOUS)
    try:
        for_sam = instructions(sam, services(gateway), sam_tools)
        for_other = instructions(other, services(gateway), other_tools)
        for_anonymous = instructions(anonymous, services(gateway), anonymous_tools)
    finally:
        await ended(gateway, sam, other, anonymous)
    # The block the cascade puts in its system context, verbatim, with the rule for it.
    assert sam.conversation.memory_context and sam.conversation.memory_context in for_sam
    assert NAME in fenced(for_sam, "caller_memory") and MEMORY_POLICY in for_sam
    assert "bees" not in for_sam
    assert BEES in fenced(for_other, "caller_memory") and "Sam" not in for_other
    assert "<caller_memory>" not in for_anonymous and MEMORY_POLICY not in for_anonymous
    assert "Sam" not in for_anonymous and "bees" not in for_anonymous
    assert services(gateway).policy in for_anonymous  # the same policy, memory or none
    for text in (for_sam, for_other, for_anonymous):
        assert text.endswith(REALTIME_NOTE)
        assert TOOL_RESULTS_POLICY not in text  # no tool from outside is offered on these calls


async def test_the_functions_are_the_calls_tools_in_realtimes_shape_without_digit_forms(gateway: Gateway) -> None:
    sam, sam_tools = await opened(gateway, SAM)
    anonymous, anonymous_tools = await opened(gateway, ANONYMOUS)
    try:
        offered = function_tools(services(gateway), sam_tools)
        offered_anonymous = function_tools(services(gateway), anonymous_tools)
        refused = await run_function_calls(services(gateway), [ToolCall("c1", "collect_digits", {"prompt": "PIN?"})],
                                           sam_tools)
    finally:
        await ended(gateway, sam, anonymous)
    names = [tool["name"] for tool in offered]
    assert "memory" in names and "end_call" in names
    assert "memory" not in [tool["name"] for tool in offered_anonymous]  # no memory for an anonymous caller
    for tool in offered:  # Realtime's flat function shape (no nested "function")
        assert set(tool) == {"type", "name", "description", "parameters"} and tool["type"] == "function"
    (memory,) = [tool for tool in offered if tool["name"] == "memory"]
    assert memory["parameters"] == MEMORY_TOOL_PARAMETERS and "append" in memory["description"]
    # Registered (the cascade offers it) but not offered here: it needs the cascade's recogniser and turns.
    assert "collect_digits" in services(gateway).tools
    assert "collect_digits" in [spec.name for spec in services(gateway).tools.specs(sam_tools)]
    assert "collect_digits" not in names
    # A model that names it anyway gets an error it can act on, and no form runs.
    assert [call_id for call_id, _ in refused] == ["c1"]
    assert "not available on this call" in json.loads(refused[0][1])["error"]


def response_done(*calls: tuple[str, dict[str, Any] | str]) -> dict[str, Any]:
    """A `response.done` event's `response` ending with these function calls (arguments as the model sent
    them: a JSON string)."""
    return {"id": "resp_1", "status": "completed", "output": [
        {"type": "function_call", "id": f"item_{n}", "call_id": f"call_{n}", "name": name,
         "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}
        for n, (name, arguments) in enumerate(calls)]}


async def test_two_memory_appends_in_one_batch_both_land_and_give_two_outputs(gateway: Gateway) -> None:
    sam, context = await opened(gateway, SAM)
    try:
        calls = function_calls(response_done(
            ("memory", {"action": "append", "document": "memory", "content": "- The caller likes green tea."}),
            ("memory", {"action": "append", "document": "user", "content": "- Call the caller Sam."}),
            ("memory", {"action": "append", "document": "memory", "content": "- The caller's cat is Miso."})))
        outputs = await run_function_calls(services(gateway), calls, context)
        docs = await documents(gateway, SAM)
    finally:
        await ended(gateway, sam)
    assert [call_id for call_id, _ in outputs] == ["call_0", "call_1", "call_2"]
    results = [json.loads(text) for _, text in outputs]
    assert all(result.get("ok") is True and result["changed"] is True for result in results), results
    # Each write started from the latest document: the third's result holds the first's line too.
    assert results[2]["documents"]["memory"]["content"].splitlines() == [
        "- The caller likes green tea.", "- The caller's cat is Miso."]
    assert "- The caller likes green tea." in docs["memory"] and "- The caller's cat is Miso." in docs["memory"]
    assert docs["user"] == "- Call the caller Sam."


async def test_a_stale_or_ambiguous_replace_gives_an_error_output_and_the_rest_of_the_batch_runs(
        gateway: Gateway) -> None:
    await remember(gateway, SAM, "- The caller likes green tea.")
    await remember(gateway, SAM, "- The caller's tea cup is blue.")
    sam, context = await opened(gateway, SAM)
    try:
        calls = function_calls(response_done(
            ("memory", {"action": "replace", "document": "memory", "old_text": "green tea", "new_text": "oolong"}),
            ("memory", {"action": "replace", "document": "memory", "old_text": "green tea", "new_text": "sencha"}),
            ("memory", {"action": "replace", "document": "memory", "old_text": "- The caller", "new_text": "-"}),
            ("memory", "{not json"),
            ("no_such_tool", {}),
            ("memory", {"action": "append", "document": "memory", "content": "- The caller has a dog."})))
        outputs = await run_function_calls(services(gateway), calls, context)
        docs = await documents(gateway, SAM)
    finally:
        await ended(gateway, sam)
    results = [json.loads(text) for _, text in outputs]
    assert len(results) == 6
    assert results[0].get("ok") is True  # the first replace lands...
    assert "error" in results[1]  # ...so the second's source fragment is gone: stale, refused
    assert "error" in results[2]  # in both lines: ambiguous, refused
    assert "not valid JSON" in results[3]["error"] and "unknown tool" in results[4]["error"]
    assert results[5].get("ok") is True  # the batch went on after its failures
    assert docs["memory"].splitlines() == ["- The caller likes oolong.", "- The caller's tea cup is blue.",
                                           "- The caller has a dog."]


async def test_a_tool_with_side_effects_is_told_to_the_calls_ledger(gateway: Gateway) -> None:
    async def book(arguments: dict[str, Any], context: ToolContext) -> str:
        return json.dumps({"ok": True, "table": arguments.get("seats")})

    services(gateway).tools.register("book_table", "Book a table.", {"type": "object", "properties": {
        "seats": {"type": "integer"}}}, book)
    sam, context = await opened(gateway, SAM)
    try:
        outputs = await run_function_calls(services(gateway), [ToolCall("c9", "book_table", {"seats": 2})], context)
        ledger = sam.slots.get(ACTIONS)
    finally:
        await ended(gateway, sam)
    assert outputs == [("c9", json.dumps({"ok": True, "table": 2}))]
    assert ledger is not None and [(a["name"], a["status"]) for a in ledger] == [("book_table", "ok")]


async def test_tools_from_an_mcp_server_are_offered_and_run_with_their_results_fenced(
        tmp_path: Path, fresh_db: str) -> None:
    config = memory_config(tmp_path, fresh_db)
    config.mcp = config.mcp.model_validate({"servers": [
        {"name": "orders", "command": sys.executable, "args": [str(MCP_SERVER), "stdio"], "tools": ["lookup_order"]}]})
    gateway = Gateway(config, stt=ScriptedStt([]))
    await gateway.start()
    try:
        sam, context = await opened(gateway, SAM, "sip")  # [mcp] servers are offered on sip and webrtc calls
        try:
            offered = {tool["name"]: tool for tool in function_tools(services(gateway), context)}
            text = instructions(sam, services(gateway), context)
            ((call_id, output),) = await run_function_calls(
                services(gateway), [ToolCall("c1", "orders__lookup_order", {"order_id": "ZQ-1"})], context)
        finally:
            await ended(gateway, sam)
    finally:
        await gateway.stop()
    tool = offered["orders__lookup_order"]
    assert tool["type"] == "function" and "order" in tool["description"].lower()
    assert "order_id" in tool["parameters"]["properties"]
    assert TOOL_RESULTS_POLICY in text  # a tool from outside is offered: its results are data
    assert call_id == "c1" and output.startswith('<tool_result server="orders" tool="lookup_order">')
    assert "Order ZQ-1 shipped on Monday" in output


def operator_config(tmp_path: Path, gateway: Gateway) -> Path:
    """The operator's `voicegate memory` config: the same database and owner-key secret as the gateway."""
    path = tmp_path / "operator.toml"
    path.write_text(render_toml({
        "server": {"data_dir": str(tmp_path / "operator")},
        "memory": {"enabled": True, "provider": "pgvector", "owner_key_secret": SECRET},
        "pgvector": {"connection_string": gateway.config.pgvector.connection_string}}))
    return path


async def test_an_edit_by_the_cli_in_another_process_reaches_the_instructions_at_the_next_idle_point(
        tmp_path: Path, gateway: Gateway) -> None:
    await remember(gateway, SAM, NAME)
    await remember(gateway, SAM, BEES)
    sam, context = await opened(gateway, SAM)
    live = LiveInstructions(sam, services(gateway), lambda: context)
    try:
        first = live.initial()
        assert NAME in fenced(first, "caller_memory") and BEES in fenced(first, "caller_memory")
        assert await live.at_idle() is None  # nothing changed: no session.update
        assert gateway.memory_bus is not None
        await asyncio.wait_for(gateway.memory_bus.listening.wait(), 30)  # it hears the other process's notice

        done = await asyncio.to_thread(run_cli, "--config", str(operator_config(tmp_path, gateway)), "memory",
                                       "edit", "--caller", "sip:+15551234567", "--document", "memory",
                                       "--replace", BEES, "--with", "", timeout=120)
        assert done.returncode == 0, done.stderr
        refreshed = await wait_until(live.at_idle, 30, "the CLI's edit to reach the live instructions")
        assert "bees" not in refreshed and NAME in fenced(refreshed, "caller_memory")
        assert live.sent == refreshed and await live.at_idle() is None  # sent once

        # The call's own tool write refreshes them too (the seeds' "cache-only refresh").
        await run_function_calls(services(gateway), [ToolCall("c1", "memory", {
            "action": "append", "document": "user", "content": "- Keep replies short."})], context)
        after_write = await wait_until(live.at_idle, 30, "the tool's write to reach the live instructions")
        assert "- Keep replies short." in fenced(after_write, "caller_preferences") and "bees" not in after_write
    finally:
        await ended(gateway, sam)
