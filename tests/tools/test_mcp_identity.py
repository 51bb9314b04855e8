"""Tools from MCP servers and who is asking: an anonymous caller is not offered a server's tools unless its
`require_identity` says so, and every call tells the server (real SDK server processes, over stdio and
streamable HTTP) the verified caller in `_meta` (and headers over HTTP) by an opaque, stable id."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_fake import FakeOpenAI
from tests.tools.test_mcp import http_mcp, mcp_config, one_turn, started, stdio_server, tool_messages, tool_names
from voicegate.internal.identity import CallerIdentity

__all__ = ["http_mcp"]
pytestmark = pytest.mark.slow

ANONYMOUS = CallerIdentity.anonymous("no token")
CALLER = CallerIdentity("sip", "+15551234567", "trusted peer")
OTHER = CallerIdentity("sip", "+15559876543", "trusted peer")
ELSEWHERE = "SOMEONE-ELSES-ORDER"


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key="sk-test") as server:
        yield server


def callers(calls: Path) -> list[dict[str, Any]]:
    path = Path(str(calls) + ".callers")
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_an_anonymous_caller_is_neither_offered_nor_allowed_a_servers_tools(
        tmp_path: Path, fake: FakeOpenAI) -> None:
    calls = tmp_path / "calls.jsonl"
    config = mcp_config(tmp_path, fake, [stdio_server(calls, tools=["lookup_order"])])
    assert config.mcp.servers[0].require_identity == "verified"  # the default
    gateway = await started(config)
    try:
        fake.script_tool_call("orders__lookup_order", {"order_id": ELSEWHERE})  # the model tries anyway
        fake.script_reply("I can only look orders up for signed-in customers.")
        said, _ = await one_turn(gateway, "Where is order SOMEONE-ELSES-ORDER?", caller=ANONYMOUS)
    finally:
        await gateway.stop()
    assert said == ["I can only look orders up for signed-in customers."]
    assert not any(name.startswith("orders__") for name in tool_names(fake.requests[0]))
    (result,) = tool_messages(fake.requests[1])
    assert json.loads(result) == {"error": "unknown tool 'orders__lookup_order'"}
    assert not calls.exists()  # the server never heard of it


async def test_require_identity_none_offers_the_tools_to_anonymous_callers_and_says_so(
        tmp_path: Path, fake: FakeOpenAI) -> None:
    calls = tmp_path / "calls.jsonl"
    config = mcp_config(tmp_path, fake, [stdio_server(calls, tools=["lookup_order"], require_identity="none")])
    gateway = await started(config)
    try:
        fake.script_tool_call("orders__lookup_order", {"order_id": "ZQ-1"})
        fake.script_reply("It shipped.")
        await one_turn(gateway, "Where is my parcel?", caller=ANONYMOUS)
    finally:
        await gateway.stop()
    assert "orders__lookup_order" in tool_names(fake.requests[0])
    assert callers(calls) == [{"caller": {"kind": "anonymous"}, "headers": {}}]


async def test_a_verified_caller_reaches_the_server_as_an_opaque_stable_id(tmp_path: Path, fake: FakeOpenAI) -> None:
    calls = tmp_path / "calls.jsonl"
    config = mcp_config(tmp_path, fake, [stdio_server(calls, tools=["lookup_order"]),
                                         {**stdio_server(calls, tools=["lookup_order"]), "name": "crm",
                                          "caller_id": "raw", "require_identity": "sip"}])
    gateway = await started(config)
    try:
        for caller, tool in ((CALLER, "orders"), (CALLER, "orders"), (OTHER, "orders"), (CALLER, "crm")):
            fake.script_tool_call(f"{tool}__lookup_order", {"order_id": "ZQ-1"})
            fake.script_reply("It shipped.")
            await one_turn(gateway, "Where is my parcel?", "sip", caller=caller)
    finally:
        await gateway.stop()
    first, again, other, raw = (entry["caller"] for entry in callers(calls))
    assert first["kind"] == "sip" and first["id_format"] == "opaque" and len(first["id"]) == 32
    assert again == first  # the same caller, another call: the same id
    assert other["id"] != first["id"]
    assert "5551234567" not in json.dumps([first, other])  # never the number itself
    assert raw == {"kind": "sip", "id": "+15551234567", "id_format": "raw"}  # caller_id = "raw": the number


async def test_a_server_over_http_gets_the_caller_in_headers_too(
        tmp_path: Path, fake: FakeOpenAI, http_mcp: tuple[str, Path]) -> None:
    url, calls = http_mcp
    config = mcp_config(tmp_path, fake, [{"name": "orders", "url": url, "tools": ["lookup_order"],
                                          "headers": {"X-Voicegate-Caller-Id": "spoofed-by-config"}}])
    gateway = await started(config)
    try:
        fake.script_tool_call("orders__lookup_order", {"order_id": "ZQ-1"})
        fake.script_reply("It shipped.")
        await one_turn(gateway, "Where is my parcel?", caller=CallerIdentity("jwt", "alice"))
    finally:
        await gateway.stop()
    (entry,) = callers(calls)
    assert entry["caller"]["kind"] == "jwt" and entry["caller"]["id_format"] == "opaque"
    assert entry["headers"] == {"x-voicegate-caller-kind": "jwt", "x-voicegate-caller-id": entry["caller"]["id"]}
