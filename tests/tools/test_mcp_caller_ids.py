"""The opaque caller id an MCP server sees: made from the owner-key secret under a label of
its own, never from the owner key, which memory tables, recording sidecars and exports hold in clear. So
whoever holds an export cannot compute the id every tool server sees; the id stays the same for a caller
across calls and across nodes that share the secret, and differs between callers. Real SDK server
processes over stdio, the gateway's own memory for the owner key."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_fake import FakeOpenAI
from tests.tools.test_mcp import mcp_config, one_turn, started, stdio_server
from voicegate.internal.config import Config
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.memory.owner import SECRET_FILE

pytestmark = pytest.mark.slow

CALLER = CallerIdentity("sip", "+15551234567", "trusted peer")
OTHER = CallerIdentity("sip", "+15559876543", "trusted peer")
SHARED_SECRET = "the-secret-every-node-of-this-cluster-shares"


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key="sk-test") as server:
        yield server


def ids_seen(calls: Path) -> list[str]:
    """The caller ids the server was told, in order."""
    lines = Path(str(calls) + ".callers").read_text().splitlines()
    return [json.loads(line)["caller"]["id"] for line in lines]


async def lookups(config: Config, fake: FakeOpenAI, callers: list[CallerIdentity]) -> Any:
    """A gateway on `config` answers one turn per caller, each calling the server's lookup; the gateway."""
    gateway = await started(config)
    try:
        for caller in callers:
            fake.script_tool_call("orders__lookup_order", {"order_id": "ZQ-1"})
            fake.script_reply("It shipped.")
            await one_turn(gateway, "Where is my parcel?", "sip", caller=caller)
    finally:
        await gateway.stop()
    return gateway


def documented_id(secret: bytes, server: str, identity: CallerIdentity) -> str:
    """docs/tools.md: HMAC-SHA256 of `<server>:<kind>:<value>` under a key made from the owner-key secret
    and the label "voicegate mcp caller id v1", 32 hex digits."""
    key = hmac.new(secret, b"voicegate mcp caller id v1", hashlib.sha256).digest()
    return hmac.new(key, f"{server}:{identity.resource_id}".encode(), hashlib.sha256).hexdigest()[:32]


def from_owner_key_alone(owner: str, server: str) -> set[str]:
    """What anyone holding an export (which has the owner key) could compute: today's derivation and the
    obvious variants of it."""
    key, name = owner.encode(), server.encode()
    return {digest[:32] for digest in (
        hmac.new(key, b"voicegate mcp caller v1:" + name, hashlib.sha256).hexdigest(),  # the old id, from the owner key
        hmac.new(key, b"voicegate mcp caller id v1:" + name, hashlib.sha256).hexdigest(),
        hmac.new(key, name, hashlib.sha256).hexdigest(),
        hmac.new(name, key, hashlib.sha256).hexdigest(),
        hashlib.sha256(key + name).hexdigest(),
        hashlib.sha256(key).hexdigest(),
        owner,
    )}


async def test_knowing_a_callers_owner_key_does_not_give_the_id_tool_servers_see(
        tmp_path: Path, fake: FakeOpenAI) -> None:
    calls = tmp_path / "calls.jsonl"
    config = mcp_config(tmp_path, fake, [stdio_server(calls, tools=["lookup_order"])])
    config.memory.enabled, config.memory.provider = True, "memory"
    gateway = await lookups(config, fake, [CALLER])
    assert gateway.memory is not None
    owner = gateway.memory.owner_key(CALLER)  # what memory tables, sidecars and exports hold in clear
    assert owner is not None
    secret = (tmp_path / "data" / SECRET_FILE).read_bytes().strip()
    (seen,) = ids_seen(calls)
    assert seen not in from_owner_key_alone(owner, "orders")
    assert seen == documented_id(secret, "orders", CALLER)  # from the secret, under its own label


async def test_the_id_is_the_same_on_every_node_that_shares_the_secret_and_differs_between_callers(
        tmp_path: Path, fake: FakeOpenAI) -> None:
    seen: list[list[str]] = []
    for node in ("node-a", "node-b"):  # two nodes: their own data directories, the same configured secret
        calls = tmp_path / f"{node}.jsonl"
        config = mcp_config(tmp_path / node, fake, [stdio_server(calls, tools=["lookup_order"])])
        config.memory.owner_key_secret = SHARED_SECRET
        await lookups(config, fake, [CALLER, CALLER, OTHER])
        seen.append(ids_seen(calls))
    (first, again, other), on_b = seen
    assert first == again  # another call, the same caller
    assert on_b == seen[0]  # another node (another process of the server, another data directory)
    assert other != first  # another caller
    assert first == documented_id(SHARED_SECRET.encode(), "orders", CALLER)


async def test_the_generated_secret_keeps_the_id_across_restarts(tmp_path: Path, fake: FakeOpenAI) -> None:
    """Memory off, no configured secret: the secret generated into the data directory on the first start
    gives the same id after a restart."""
    calls = tmp_path / "calls.jsonl"
    config = mcp_config(tmp_path, fake, [stdio_server(calls, tools=["lookup_order"])])
    await lookups(config, fake, [CALLER])
    await lookups(config, fake, [CALLER])
    first, after_restart = ids_seen(calls)
    assert after_restart == first
    assert first == documented_id((tmp_path / "data" / SECRET_FILE).read_bytes().strip(), "orders", CALLER)
