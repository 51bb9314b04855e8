"""Tools from real MCP server processes (tests/tools/mcp_server.py, written with the SDK), over stdio and
streamable HTTP, called by the pipeline with the arguments a model (the OpenAI-protocol fake) chose."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import free_port
from tests.fakes.openai_fake import FakeOpenAI
from tests.pipeline.conftest import ScriptedStt
from voicegate.internal.config import Config, load_config
from voicegate.internal.config.mcp import McpConfig
from voicegate.internal.event_envelope import CollectingSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.pipeline.context import TOOL_RESULTS_POLICY
from voicegate.internal.pipeline.events import TranscriptEvent
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.internal.tools.mcp import McpToolset
from voicegate.internal.tools.mcp_results import CLOSE, CUT_NOTICE
from voicegate.internal.tools.registry import ToolError, ToolRegistry
from voicegate.server.app import create_gateway_application
from voicegate.server.doctor_mcp import check_mcp
from voicegate.server.gateway import Gateway

pytestmark = pytest.mark.slow

SERVER = Path(__file__).with_name("mcp_server.py")
ORDER = "ZQ-4471"  # the model's argument: it must reach the server, and never a log line


def mcp_config(tmp_path: Path, fake: FakeOpenAI, servers: list[dict[str, Any]]) -> Config:
    config = load_config(None)
    config.server.data_dir = str(tmp_path / "data")
    config.llm.provider = "openai"
    config.openai.base_url = fake.url + "/v1"
    config.openai.api_key = "sk-test"
    config.stt.provider = "pocketsphinx"  # not used: the tests give the gateway a scripted recogniser
    config.tts.provider = "espeak"
    config.pipeline.greeting = ""
    config.sip.enabled = False
    config.telemetry.traces = "memory"
    config.mcp = config.mcp.model_validate({"servers": servers})
    return config


def stdio_server(calls: Path, **keys: Any) -> dict[str, Any]:
    return {"name": "orders", "command": sys.executable, "args": [str(SERVER), "stdio"],
            "env": {"MCP_TEST_CALLS": str(calls), "MCP_TEST_CALLERS": str(calls) + ".callers"}, **keys}


@pytest.fixture
def http_mcp(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The same server over streamable HTTP, as its own process on a free port."""
    port = free_port()
    calls = tmp_path / "http-calls.jsonl"
    process = subprocess.Popen([sys.executable, str(SERVER), "http", str(port)], env={
        "MCP_TEST_CALLS": str(calls), "MCP_TEST_CALLERS": str(calls) + ".callers", "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert process.poll() is None, "the MCP server process died"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp", calls
    finally:
        process.terminate()
        process.wait(10)


async def started(config: Config) -> Gateway:
    gateway = Gateway(config, stt=ScriptedStt([]))
    await gateway.start()
    return gateway


async def one_turn(gateway: Gateway, text: str, transport: str = "webrtc",
                   caller: CallerIdentity = CallerIdentity("jwt", "alice")) -> tuple[list[str], CollectingSink]:
    """A typed turn on a call of `transport` from `caller`; what the agent said."""
    session = await gateway.open_session(caller, transport)  # type: ignore[arg-type]
    sink = CollectingSink()
    pipeline = gateway.new_pipeline(session, 16000, sink)
    async with LocalCall(pipeline) as call:
        pipeline.submit_text(text)
        await call.ticks_later(5)
        await call.wait_agent_quiet(600, timeout_s=90)
    assert gateway.sessions is not None
    await gateway.sessions.end(session, "test over")
    said = [e.text for e in sink.events if isinstance(e, TranscriptEvent) and e.role == "agent"]
    return said, sink


async def tool_turn(config: Config, fake: FakeOpenAI, tool: str, reply: str, text: str) -> tuple[list[str], Gateway]:
    """A gateway on `config` answers one typed turn: the model calls `tool` with ORDER, then says `reply`."""
    gateway = await started(config)
    try:
        fake.script_tool_call(tool, {"order_id": ORDER})
        fake.script_reply(reply)
        said, _ = await one_turn(gateway, text)
    finally:
        await gateway.stop()
    return said, gateway


def tool_names(request: dict[str, Any]) -> set[str]:
    return {tool["function"]["name"] for tool in request.get("tools", [])}


def tool_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key="sk-test") as server:
        yield server


async def test_allowed_tools_are_offered_called_with_the_models_arguments_and_their_result_fenced(
        tmp_path: Path, fake: FakeOpenAI, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    calls = tmp_path / "calls.jsonl"
    config = mcp_config(tmp_path, fake, [
        stdio_server(calls, tools=["lookup_order", "slow_lookup"]),
        {**stdio_server(calls), "name": "phone_only", "tools": ["*"], "enabled_for": ["sip"]},
    ])
    said, gateway = await tool_turn(config, fake, "orders__lookup_order", "Your order shipped on Monday.",
                                    "Where is my parcel?")
    assert said == ["Your order shipped on Monday."]
    first, second = fake.requests
    offered = tool_names(first)
    assert {"orders__lookup_order", "orders__slow_lookup"} <= offered
    assert "orders__delete_account" not in offered and "orders__failing_lookup" not in offered  # not allowed
    assert not any(name.startswith("phone_only__") for name in offered)  # enabled_for ["sip"]: not on this call
    assert TOOL_RESULTS_POLICY in first["messages"][0]["content"]
    assert [json.loads(line) for line in calls.read_text().splitlines()] == [
        {"tool": "lookup_order", "arguments": {"order_id": ORDER}}]
    (result,) = tool_messages(second)
    assert result.startswith('<tool_result server="orders" tool="lookup_order">\n')
    assert f"Order {ORDER} shipped on Monday" in result
    assert result.endswith(CLOSE) and result.count(CLOSE) == 1 and "<system>" not in result  # cannot break out
    assert "\u2039/tool_result\u203a" in result  # its own attempt, defused
    assert len(result) <= config.mcp.max_result_chars and CUT_NOTICE in result  # bounded, and says so
    metrics = gateway.telemetry.prometheus()
    assert 'voicegate_tool_calls_total{outcome="ok",source="mcp:orders",tool="orders__lookup_order"} 1' in metrics
    assert 'voicegate_tool_call_ms_count{source="mcp:orders",tool="orders__lookup_order"} 1' in metrics
    assert gateway.telemetry.spans is not None
    spans = gateway.telemetry.spans.get_finished_spans()
    (tool_span,) = [s for s in spans if s.name == "tool"]
    (turn_span,) = [s for s in spans if s.name == "turn"]
    assert tool_span.attributes is not None and dict(tool_span.attributes) == {
        "voicegate.tool": "orders__lookup_order", "voicegate.tool.source": "mcp:orders",
        "voicegate.tool.outcome": "ok"}
    assert tool_span.parent is not None and tool_span.parent.span_id == turn_span.context.span_id
    logged = [f"{record.getMessage()} {record.__dict__}" for record in caplog.records]
    assert any("mcp server up" in line for line in logged)
    assert not any(ORDER in line for line in logged)  # never the arguments' text


async def test_a_slow_tool_over_http_times_out_and_the_caller_is_told(
        tmp_path: Path, fake: FakeOpenAI, http_mcp: tuple[str, Path]) -> None:
    url, calls = http_mcp
    config = mcp_config(tmp_path, fake, [{"name": "orders", "url": url, "tools": ["*"], "timeout_s": 1.5,
                                          "headers": {"X-Test": "yes"}}])
    said, gateway = await tool_turn(config, fake, "orders__slow_lookup", "Is there anything else I can help with?",
                                    "Where is my old parcel?")
    assert "orders__delete_account" in tool_names(fake.requests[0])  # "*" offers every tool
    assert json.loads(calls.read_text().splitlines()[0])["arguments"] == {"order_id": ORDER}
    # The caller hears the notice as soon as the tool is abandoned, then the model's reply.
    assert said == [f"{config.mcp.timeout_notice} Is there anything else I can help with?"], said
    (result,) = tool_messages(fake.requests[1])
    assert "did not answer within 1.5 s" in json.loads(result)["error"]
    metrics = gateway.telemetry.prometheus()
    assert 'voicegate_tool_calls_total{outcome="timeout",source="mcp:orders",tool="orders__slow_lookup"} 1' in metrics


async def test_a_tool_that_fails_tells_the_model_and_the_call_goes_on(tmp_path: Path, fake: FakeOpenAI) -> None:
    config = mcp_config(tmp_path, fake, [stdio_server(tmp_path / "calls.jsonl", tools=["failing_lookup"])])
    said, gateway = await tool_turn(config, fake, "orders__failing_lookup", "Sorry, I cannot look that up right now.",
                                    "Where is my parcel?")
    assert said == ["Sorry, I cannot look that up right now."]
    (result,) = tool_messages(fake.requests[1])
    error = json.loads(result)["error"]
    assert error.startswith('<tool_result server="orders" tool="failing_lookup">') and error.endswith(CLOSE)
    assert 'outcome="error",source="mcp:orders"' in gateway.telemetry.prometheus()


async def test_a_tool_outside_the_allow_list_never_reaches_the_server_even_when_the_model_names_it(
        tmp_path: Path, fake: FakeOpenAI) -> None:
    calls = tmp_path / "calls.jsonl"
    config = mcp_config(tmp_path, fake, [stdio_server(calls, tools=["lookup_order"])])
    said, _ = await tool_turn(config, fake, "orders__delete_account", "I can't do that.", "Close my account.")
    assert said == ["I can't do that."]
    assert "orders__delete_account" not in tool_names(fake.requests[0])
    (result,) = tool_messages(fake.requests[1])
    assert json.loads(result) == {"error": "unknown tool 'orders__delete_account'"}
    assert not calls.exists()  # the server never heard of it


async def test_servers_that_fail_are_reported_and_the_agent_goes_on_without_them(
        tmp_path: Path, fake: FakeOpenAI) -> None:
    calls = tmp_path / "calls.jsonl"
    config = mcp_config(tmp_path, fake, [
        stdio_server(calls, tools=["lookup_order"]),
        {"name": "crashes", "command": sys.executable, "args": ["-c", "import sys; sys.exit(3)"], "tools": ["*"],
         "connect_timeout_s": 10},
        {"name": "nobody", "url": f"http://127.0.0.1:{free_port()}/mcp", "tools": ["*"], "connect_timeout_s": 5},
    ])
    config.server.api_key = "mcp-test-api-key-0123456789"
    app = create_gateway_application(config, stt=ScriptedStt([]))
    gateway: Gateway = app.state.gateway
    await gateway.start()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://voicegate") as client:
            public = (await client.get("/health")).json()
            keyed = (await client.get("/health", headers={"X-API-Key": config.server.api_key})).json()
        assert public["status"] == "ok"  # advisory: a tool server being down does not take the node out
        mcp = public["components"]["mcp"]
        # Anyone sees how many are up; which servers, their tools and why one failed: the key's holder only.
        assert mcp == {"ok": False, "advisory": True, "servers_up": 1, "servers": 3}
        states = {server["name"]: server["state"] for server in keyed["components"]["mcp"]["servers"]}
        assert states == {"orders": "up", "crashes": "down", "nobody": "down"}
        errors = {server["name"]: server.get("error", "") for server in keyed["components"]["mcp"]["servers"]}
        assert errors["nobody"] and errors["crashes"] and not errors["orders"]
        fake.script_reply("I can still help you.")
        said, _ = await one_turn(gateway, "Hello?")
        assert said == ["I can still help you."]
        assert tool_names(fake.requests[0]) >= {"orders__lookup_order"}
        assert not any(name.startswith(("crashes__", "nobody__")) for name in tool_names(fake.requests[0]))
    finally:
        await gateway.stop()
    checks = {check.name: check for check in await asyncio.to_thread(check_mcp, config)}
    assert checks["mcp server orders"].ok is True and "lookup_order" in checks["mcp server orders"].detail
    assert checks["mcp server crashes"].ok is False and "by hand" in checks["mcp server crashes"].fix
    assert checks["mcp server nobody"].ok is False and "answers at" in checks["mcp server nobody"].fix


async def test_the_offline_local_agent_says_it_cannot_call_mcp_tools(tmp_path: Path, fake: FakeOpenAI) -> None:
    config = mcp_config(tmp_path, fake, [stdio_server(tmp_path / "calls.jsonl", tools=["lookup_order"])])
    config.llm.provider = "local"
    config.server.api_key = "mcp-test-api-key-0123456789"
    app = create_gateway_application(config, stt=ScriptedStt([]))
    await app.state.gateway.start()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://voicegate") as client:
            body = (await client.get("/api/agent")).json()
            keyed = (await client.get("/api/agent", headers={"X-API-Key": config.server.api_key})).json()
    finally:
        await app.state.gateway.stop()
    assert body["llm"] == "local" and body["mcp"]["callable"] is False
    assert "cannot call MCP tools" in body["mcp"]["note"]
    assert "servers" not in body["mcp"]  # which servers and tools: for the API key's holder
    assert keyed["mcp"]["servers"] == [{"name": "orders", "state": "up", "tools": ["orders__lookup_order"]}]


async def test_a_server_that_dies_mid_call_is_reconnected_and_its_tools_work_again(tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    config = McpConfig.model_validate({"servers": [stdio_server(calls, tools=["*"])]})
    toolset = McpToolset(config, ToolRegistry())
    await toolset.start()
    try:
        (connection,) = toolset.connections
        assert connection.up
        with pytest.raises(ToolError, match="not reachable"):
            await connection.call("crash_server", {})
        assert connection.state == "down"
        for _ in range(600):  # the retry starts a new process (about a second, then its start-up)
            if connection.up:
                break
            await asyncio.sleep(0.05)
        result = await connection.call("lookup_order", {"order_id": ORDER})
        assert ORDER in result.content[0].text  # type: ignore[union-attr]
    finally:
        await toolset.close()
    assert [json.loads(line)["tool"] for line in calls.read_text().splitlines()] == ["crash_server", "lookup_order"]
