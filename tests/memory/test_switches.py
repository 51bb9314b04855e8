"""The memory switches an operator can turn on, each run for real: `injection = "retrieval"`,
`read` with a query (the tool, and pgvector's `query()`), `auto = false`, `memory.changed` after tool,
hang-up digest and reconciliation writes, the instruction order in a conversation, the 50-character gist.
PostgreSQL with pgvector is real (pgserver), the embeddings are WordLlama's, the model is the fake
OpenAI-protocol server."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import websockets

from tests.fakes.openai_fake import FakeOpenAI
from tests.memory.conftest import make_runtime
from tests.memory.processes import ScriptedOpenAI, tool_call
from tests.memory.test_action_ledger import OWNER_KEY, hangup
from tests.memory.test_api import SECRET, token
from tests.memory.test_calls import call
from tests.memory.test_stated_preferences import openai_gateway
from tests.webrtc.harness import live_server, webrtc_config
from voicegate.internal.config import load_config
from voicegate.internal.event_envelope import CollectingSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.llm.openai import OpenAIChatModel
from voicegate.internal.memory.events import MemoryChangedEvent
from voicegate.internal.memory.provider import ChangeContext, QueryOptions
from voicegate.internal.memory.providers.pgvector import PgvectorProvider
from voicegate.internal.memory.reconcile import SessionDigestRecorder, fallback_digest
from voicegate.internal.pipeline.context import ASSISTANT_PROFILE_HEADING, MEMORY_POLICY
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.server.gateway import Gateway

SAM = CallerIdentity("sip", "+15551234567", "trusted peer")
FACTS = ["- The caller has a dog called Biscuit.", "- The caller lives in Lisbon.",
         "- The caller is on the enterprise plan.", "- The caller's car is a red Volvo."]


@pytest.fixture
async def fake() -> AsyncIterator[ScriptedOpenAI]:
    model = ScriptedOpenAI()
    await asyncio.to_thread(model.start)
    yield model
    await asyncio.to_thread(model.stop)


async def seeded(gateway: Gateway, identity: CallerIdentity = SAM) -> str:
    assert gateway.memory is not None
    owner = gateway.memory.owner_key(identity)
    assert owner is not None
    await gateway.memory.edit(owner, "user", "append", content="- Call the caller Sam.", context=ChangeContext("api"))
    await gateway.memory.edit(owner, "memory", "append", content="\n".join(FACTS), context=ChangeContext("api"))
    return owner


def section(prompt: str, tag: str) -> str:
    return prompt[prompt.find(f"<{tag}>"):prompt.find(f"</{tag}>")]


# ---- injection = "retrieval" and read with a query -----------------------------------------------------

async def test_retrieval_injects_only_the_lines_about_this_turn_and_every_preference(
        tmp_path: Path, fresh_db: str, fake: ScriptedOpenAI) -> None:
    gateway = openai_gateway(tmp_path, fresh_db, fake, injection="retrieval", retrieval_top_k=1, auto=False)
    await gateway.start()
    try:
        await seeded(gateway)
        await call(gateway, SAM, "how is my dog Biscuit doing", "which city do I live in")
    finally:
        await gateway.stop()
    dog, city = (turn.prompt for turn in fake.turns[:2])
    assert "Biscuit" in section(dog, "caller_memory") and "Lisbon" not in section(dog, "caller_memory")
    assert "Lisbon" in section(city, "caller_memory") and "Biscuit" not in section(city, "caller_memory")
    for prompt in (dog, city):  # preferences stay whole in the prompt; other facts are not there at all
        assert "Call the caller Sam." in section(prompt, "caller_preferences")
        assert "Volvo" not in prompt and "enterprise" not in prompt


async def test_read_with_a_query_through_the_tool_and_pgvector(tmp_path: Path, fresh_db: str,
                                                              fake: ScriptedOpenAI) -> None:
    gateway = openai_gateway(tmp_path, fresh_db, fake, auto=False)
    await gateway.start()
    try:
        owner = await seeded(gateway)
        assert gateway.memory is not None and gateway.memory.capabilities.semantic_query
        provider = gateway.memory.provider.inner
        assert isinstance(provider, PgvectorProvider)
        direct = await provider.query(owner, "my pet", QueryOptions(top_k=2))
        fake.turn_replies.append(tool_call("memory", action="read", query="what pet do I have"))
        await call(gateway, SAM, "what pet do I have")
    finally:
        await gateway.stop()
    assert direct.memories[0] == "The caller has a dog called Biscuit." and len(direct.memories) == 2
    assert direct.context.startswith("- The caller has a dog called Biscuit.")
    (result,) = [m for body in fake.requests for m in body["messages"] if m.get("role") == "tool"]
    read = json.loads(result["content"])
    assert read["matches"][0] == "The caller has a dog called Biscuit."  # the most relevant line first
    assert set(read["documents"]) == {"user", "memory"}


# ---- auto = false -------------------------------------------------------------------------------------

async def test_auto_false_sends_nothing_to_a_model_after_the_call_even_with_a_key(
        tmp_path: Path, fresh_db: str, fake: ScriptedOpenAI) -> None:
    fake.reconcile_reply = json.dumps({"edits": [{"document": "memory", "action": "append",
                                                  "content": "- The caller has a cat."}]})
    gateway = openai_gateway(tmp_path, fresh_db, fake, auto=False)
    await gateway.start()
    try:
        await call(gateway, SAM, "I also have a cat")
        assert gateway.memory is not None
        owner = gateway.memory.owner_key(SAM)
        assert owner is not None
        memory = (await gateway.memory.latest(owner))["memory"].content
    finally:
        await gateway.stop()
    assert all(body.get("stream") for body in fake.requests)  # only the call's own turns
    assert "the caller said \u201cI also have a cat\u201d" in memory  # the call's line quotes the caller
    assert "- The caller has a cat." not in memory  # no reconciliation


# ---- memory.changed after every kind of write -------------------------------------------------------------

async def test_memory_changed_follows_tool_hang_up_digest_and_reconciliation_writes(
        tmp_path: Path, fake: ScriptedOpenAI) -> None:
    config = webrtc_config(tmp_path, jwt_secret=SECRET, patch_rate_per_min=0)
    config.memory.enabled, config.memory.provider, config.memory.auto = True, "memory", True
    config.llm.provider = "openai"
    config.openai.api_key, config.openai.base_url = "k", fake.url + "/v1"
    fake.turn_replies.append(tool_call("memory", action="append", document="memory", content="- Has a cat."))
    fake.reconcile_reply = json.dumps({"edits": [{"document": "memory", "action": "append",
                                                  "content": "- The caller adopted the cat in May."}]})
    alice = CallerIdentity("jwt", "alice", "jwt")
    async with live_server(config) as server:
        gateway = server.gateway
        url = server.url.replace("http://", "ws://") + f"/api/events?token={token('alice')}"
        async with websockets.connect(url) as page:
            events: list[dict[str, Any]] = []

            async def listen() -> None:
                async for message in page:
                    events.append(json.loads(message))

            listener = asyncio.create_task(listen())
            session = await gateway.open_session(alice, "webrtc")
            sink = CollectingSink()
            pipeline = gateway.new_pipeline(session, 16000, sink)
            async with LocalCall(pipeline, speed=30.0) as live:
                await live.wait_agent_quiet(100)
                pipeline.submit_text("remember that I have a cat")
                await live.wait_agent_quiet(100)
            on_call = [e for e in sink.events if isinstance(e, MemoryChangedEvent)]
            assert len(on_call) == 1  # the tool's write, on the call's own DataChannel
            await asyncio.sleep(0.5)
            during = len(events)
            assert gateway.sessions is not None and gateway.session_memory is not None
            await gateway.sessions.end(session, "caller hung up")
            await gateway.sessions.drain()
            await gateway.session_memory.drain(30)
            await asyncio.sleep(0.5)
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
        assert gateway.memory is not None
        owner = gateway.memory.owner_key(alice)
        assert owner is not None
        memory = (await gateway.memory.latest(owner))["memory"].content
    assert during == 1  # the tool's write reached the page
    assert len(events) == 3, events  # ... then the hang-up digest's, then reconciliation's
    assert all(set(event) == {"type", "ts"} and event["type"] == "memory.changed" for event in events)
    assert "- Has a cat." in memory and "adopted the cat in May" in memory and "## Recent calls" in memory
    audit = [json.loads(line) for line in (tmp_path / "data" / "memory-audit.jsonl").read_text().splitlines()]
    applied = [line["source"] for line in audit if line.get("outcome") == "applied"]
    assert applied == ["tool", "digest", "reconciliation"]


# ---- the instruction order ----------------------------------------------------------------------------

async def test_a_conversation_keeps_policy_current_request_preferences_profile_in_that_order(
        tmp_path: Path, fresh_db: str, fake: ScriptedOpenAI) -> None:
    profile = tmp_path / "ASSISTANT.md"
    profile.write_text("You are Pip, the Acme assistant. Answer in long, friendly paragraphs.\n")
    gateway = openai_gateway(tmp_path, fresh_db, fake, auto=False)
    gateway.config.pipeline.assistant_profile = str(profile)
    await gateway.start()
    try:
        assert gateway.memory is not None
        owner = gateway.memory.owner_key(SAM)
        assert owner is not None
        await gateway.memory.edit(owner, "user", "append", context=ChangeContext("api"),
                                  content="- Keep replies to one sentence.\n- Call yourself Skiff.")
        await call(gateway, SAM, "just this once, explain it in detail")
    finally:
        await gateway.stop()
    (turn,) = fake.turns
    messages = turn.body["messages"]
    system = messages[0]["content"]
    policy_at, rule_at = 0, system.index(MEMORY_POLICY)
    preferences_at, profile_at = system.index("<caller_preferences>"), system.index(ASSISTANT_PROFILE_HEADING)
    assert policy_at < rule_at < preferences_at < profile_at  # policy, its rule, preferences, then the profile
    assert "Call yourself Skiff." in section(system, "caller_preferences") and "You are Pip" in system[profile_at:]
    # The rule states the order: preferences override the profile, never the policy or the current request.
    assert "overrides the assistant" in MEMORY_POLICY and "never this policy or the caller's current request" in (
        " ".join(MEMORY_POLICY.split()))
    # The caller's current request comes last, as the caller's own message, after every instruction.
    assert messages[-1] == {"role": "user", "content": "just this once, explain it in detail"}


# ---- the 50-character gist ----------------------------------------------------------------------------

async def test_a_gist_is_never_longer_than_50_characters(provider: Any, tmp_path: Path) -> None:
    runtime = make_runtime(provider, tmp_path, session_digests=True)
    long_line = "I would like to book a table for four people on Friday evening by the window"
    keywords = fallback_digest(hangup([], said=[long_line])).gist
    assert len(keywords) <= 50 and keywords.endswith("…")
    call = hangup([], said=[long_line])
    call.transcript = f"Caller: {long_line}\n"
    async with FakeOpenAI() as model_server:
        model_server.script_reply(json.dumps({"topics": ["booking"], "gist": "x" * 120}))  # a model ignoring it
        model = OpenAIChatModel(load_config(None).openai, base_url=model_server.url + "/v1", api_key="k")
        try:
            await SessionDigestRecorder(runtime, model)(call)
        finally:
            await model.aclose()
    await SessionDigestRecorder(runtime, None)(hangup([], said=[long_line]))
    digests = await runtime.session_digests(OWNER_KEY, 5)  # what `recall` answers from
    assert sorted(d.gist for d in digests) == sorted(["x" * 50, keywords])
