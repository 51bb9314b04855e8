"""Caller memory across calls, through the real gateway: sessions, pipeline, tools, digest, PostgreSQL.

Transports are exercised by the SIP and WebRTC suites; here a call is a session driven by LocalCall
with typed turns, so each test is about memory and not about audio.
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_fake import FakeOpenAI
from tests.memory.conftest import base_config
from tests.pipeline.conftest import ScriptedStt
from voicegate.internal.config import Config
from voicegate.internal.event_envelope import CollectingSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.llm.openai import OpenAIChatModel
from voicegate.internal.pipeline.events import TranscriptEvent
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.internal.session import Session
from voicegate.internal.telemetry import configure_logging
from voicegate.server.gateway import Gateway

SAM = CallerIdentity("sip", "+15551234567", "trusted peer")
OTHER = CallerIdentity("sip", "+15559876543", "trusted peer")
STORY = "my name is Sam, I'm on the enterprise plan, keep your answers short"


def memory_config(tmp_path: Path, db_uri: str, **memory: Any) -> Config:
    config = base_config(tmp_path)
    config.memory.enabled = True
    config.pgvector.connection_string = db_uri
    config.sip.enabled = False
    for key, value in memory.items():
        setattr(config.memory, key, value)
    return config


@pytest.fixture
async def gateway_factory(tmp_path: Path, fresh_db: str) -> AsyncIterator[Any]:
    started: list[Gateway] = []

    async def make(model: Any = None, **memory: Any) -> Gateway:
        gateway = Gateway(memory_config(tmp_path, fresh_db, **memory), stt=ScriptedStt([]), model=model)
        await gateway.start()
        started.append(gateway)
        return gateway

    yield make
    for gateway in started:
        await gateway.stop()


async def call(gateway: Gateway, identity: CallerIdentity, *turns: str) -> tuple[Session, CollectingSink]:
    session = await gateway.open_session(identity, "talk")
    sink = CollectingSink()
    pipeline = gateway.new_pipeline(session, 16000, sink)
    async with LocalCall(pipeline, speed=30.0) as live:  # typed turns: nothing depends on real-time audio
        await live.wait_agent_quiet(100)
        for text in turns:
            pipeline.submit_text(text)
            await live.wait_agent_quiet(100)
    assert gateway.sessions is not None and gateway.session_memory is not None
    await gateway.sessions.end(session, "caller hung up")
    await gateway.sessions.drain()
    await gateway.session_memory.drain(30)
    return session, sink


def agent_lines(sink: CollectingSink) -> list[str]:
    return [e.text for e in sink.events if isinstance(e, TranscriptEvent) and e.role == "agent"]


async def documents(gateway: Gateway, identity: CallerIdentity) -> dict[str, str]:
    assert gateway.memory is not None
    owner = gateway.memory.owner_key(identity)
    assert owner is not None
    return {scope: doc.content for scope, doc in (await gateway.memory.latest(owner)).items()}


async def test_the_story_with_the_offline_agent(gateway_factory: Any) -> None:
    gateway = await gateway_factory()
    _, first = await call(gateway, SAM, STORY)
    assert agent_lines(first)[-1] == ("Nice to meet you, Sam. You're on the enterprise plan. "
                                      "I'll keep my answers short.")
    docs = await documents(gateway, SAM)
    facts = [line for line in docs["memory"].splitlines() if line.startswith("- The caller")]
    assert facts == ["- The caller's name is Sam.", "- The caller is on the enterprise plan."]
    assert "## Recent calls" in docs["memory"]  # the bounded digest of this call
    assert docs["user"] == "- Keep replies short."

    _, second = await call(gateway, SAM, "who are you")
    assert agent_lines(second)[0] == gateway.config.pipeline.greeting  # no returning greeting configured
    assert agent_lines(second)[1] == "I'm voicegate's offline assistant."  # short, as asked

    _, stranger = await call(gateway, OTHER, "who are you")
    assert agent_lines(stranger)[0] == gateway.config.pipeline.greeting
    assert "not a full language model" in agent_lines(stranger)[1]


async def test_the_returning_greeting_is_the_deployers_own_text(gateway_factory: Any) -> None:
    gateway = await gateway_factory()
    disclosure = "Hello, this is Acme support. We remember earlier calls; say 'forget me' to erase them."
    gateway.config.pipeline.greeting = disclosure
    assert gateway.session_memory is not None
    gateway.session_memory.greeting = disclosure
    gateway.session_memory.returning_greeting = "Welcome back to Acme, {name}. We remember earlier calls."
    _, first = await call(gateway, SAM, "my name is Sam")
    assert agent_lines(first)[0] == disclosure  # not known yet
    _, second = await call(gateway, SAM, "who are you")
    assert agent_lines(second)[0] == "Welcome back to Acme, Sam. We remember earlier calls."
    _, stranger = await call(gateway, OTHER, "who are you")
    assert agent_lines(stranger)[0] == disclosure
    # OTHER is remembered now (a digest line) but by no name: a template with {name} is not used.
    assert "## Recent calls" in (await documents(gateway, OTHER))["memory"]
    _, returning_nameless = await call(gateway, OTHER, "hello")
    assert agent_lines(returning_nameless)[0] == disclosure


async def test_the_model_sees_the_callers_memory_and_nobody_elses(gateway_factory: Any) -> None:
    async with FakeOpenAI() as fake:
        gateway = await gateway_factory()
        assert gateway.memory is not None
        owner = gateway.memory.owner_key(SAM)
        assert owner is not None
        from voicegate.internal.memory.provider import ChangeContext

        await gateway.memory.edit(owner, "memory", "append", content="- The caller's name is Sam.",
                                  context=ChangeContext("api"))
        gateway.services.model = OpenAIChatModel(gateway.config.openai, base_url=fake.url + "/v1", api_key="k")
        await call(gateway, SAM, "hello")
        await call(gateway, OTHER, "hello")
        await call(gateway, CallerIdentity.anonymous("untrusted source"), "hello")
        sam, other, anonymous = (request["messages"][0]["content"] for request in fake.requests)
        tools = [[t["function"]["name"] for t in request.get("tools", [])] for request in fake.requests]
    assert "The caller's name is Sam." in sam and "Long-term memory" in sam
    assert "Sam" not in other and "Sam" not in anonymous
    assert "memory" in tools[0] and "memory" in tools[1] and "memory" not in tools[2]
    anonymous_docs = await documents(gateway, OTHER)
    assert "Sam" not in anonymous_docs["memory"]


async def test_an_anonymous_call_leaves_nothing(gateway_factory: Any, fresh_db: str) -> None:
    gateway = await gateway_factory()
    await call(gateway, CallerIdentity.anonymous("withheld"), STORY)
    import psycopg

    async with await psycopg.AsyncConnection.connect(fresh_db) as conn:
        for table in ("memories", "memory_items", "memory_history", "session_digests"):
            cursor = await conn.execute(f"SELECT count(*) FROM {table}")
            row = await cursor.fetchone()
            assert row == (0,), table


async def test_memory_survives_a_restart_and_stays_bounded_over_many_calls(gateway_factory: Any) -> None:
    gateway = await gateway_factory(max_chars=600)
    await call(gateway, SAM, STORY)
    await gateway.stop()
    restarted = await gateway_factory(max_chars=600)
    _, sink = await call(restarted, SAM, "what is my name")
    assert agent_lines(sink)[:2] == [restarted.config.pipeline.greeting, "Your name is Sam."]
    for n in range(18):
        await call(restarted, SAM, f"remember that my order number {n} shipped on a Tuesday in the rain")
    docs = await documents(restarted, SAM)
    assert len(docs["memory"]) <= 600 and len(docs["user"]) <= 600
    assert "The caller's name is Sam." in docs["memory"]


async def test_memory_text_never_reaches_the_logs(gateway_factory: Any) -> None:
    stream = io.StringIO()
    configure_logging("debug", stream=stream)
    try:
        gateway = await gateway_factory()
        await call(gateway, SAM, STORY, "what do you remember about me")
    finally:
        logging.getLogger().handlers.clear()
    text = stream.getvalue()
    assert "memory" in text  # memory did run and log...
    for secret in ("enterprise", "Keep replies short", "+15551234567"):
        assert secret not in text  # ...but never its content or the caller's number


async def test_database_faults_never_break_a_call_and_the_digest_lands_later(tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    from voicegate.internal.db import EmbeddedPostgres

    postgres = EmbeddedPostgres(tmp_path / "faulty")
    uri = await asyncio.to_thread(postgres.start_sync)
    config = memory_config(tmp_path, uri, write_retry_max_s=1.0)
    gateway = Gateway(config, stt=ScriptedStt([]))
    await gateway.start()
    try:
        assert gateway.sessions is not None and gateway.session_memory is not None
        # 1. The database goes away during the call: hang-up is immediate, the digest waits for it.
        session = await gateway.open_session(SAM, "talk")
        pipeline = gateway.new_pipeline(session, 16000, CollectingSink())
        async with LocalCall(pipeline, speed=6.0) as live:
            pipeline.submit_text("hello there")
            await live.wait_agent_quiet(100)
        await asyncio.to_thread(postgres.stop_sync)
        await gateway.sessions.end(session, "caller hung up")  # returns at once: the write is in the background
        for _ in range(600):  # the digest's first attempt fails (30 s at most)
            if "memory digest write failed, retrying" in caplog.text:
                break
            await asyncio.sleep(0.05)
        assert "memory digest write failed, retrying" in caplog.text

        # 2. A call that starts while the database is down proceeds without memory, and says so.
        _, sink = await call_without_waiting_for_memory(gateway, SAM, "who are you")
        assert agent_lines(sink)[0] == config.pipeline.greeting
        assert "the call goes on without" in caplog.text

        # 3. The database comes back: the digest of the first call lands.
        await asyncio.to_thread(postgres.start_sync)
        await gateway.session_memory.drain(30)
        docs = await documents(gateway, SAM)
        assert "hello there" in docs["memory"]
    finally:
        await gateway.stop()
        await asyncio.to_thread(postgres.stop_sync)


async def call_without_waiting_for_memory(gateway: Gateway, identity: CallerIdentity,
                                          text: str) -> tuple[Session, CollectingSink]:
    assert gateway.sessions is not None
    session = await gateway.open_session(identity, "talk")
    sink = CollectingSink()
    pipeline = gateway.new_pipeline(session, 16000, sink)
    async with LocalCall(pipeline, speed=6.0) as live:
        await live.wait_agent_quiet(100)
        pipeline.submit_text(text)
        await live.wait_agent_quiet(100)
    await gateway.sessions.end(session, "caller hung up")
    return session, sink


async def test_a_bring_your_own_agent_gets_memory_bounded_by_max_chars(gateway_factory: Any) -> None:
    from tests.fakes.agent_fake import FakeAgent
    from voicegate.internal.agent.client import AgentChatModel
    from voicegate.internal.config.providers import AgentConfig
    from voicegate.internal.memory.provider import ChangeContext

    async with FakeAgent(reply="Noted.") as agent:
        gateway = await gateway_factory(AgentChatModel(AgentConfig(url=agent.url + "/agent")), max_chars=600)
        assert gateway.memory is not None
        owner = gateway.memory.owner_key(SAM)
        assert owner is not None
        for scope, prefix in (("user", "Preference"), ("memory", "Fact")):
            for n in range(12):  # both documents filled to their limit, one whole line at a time
                line = f"- {prefix} {n}: the caller told us something about item {n}."
                try:
                    await gateway.memory.edit(owner, scope, "append", content=line, context=ChangeContext("api"))
                except Exception:
                    break
        await call(gateway, SAM, "what do you know about me")
        sent = [r.body["memory"] for r in agent.requests if r.body.get("memory")]
        assert sent, "the agent was never sent the caller's memory"
        stored = set((await documents(gateway, SAM))["user"].splitlines()) | set(
            (await documents(gateway, SAM))["memory"].splitlines())
        for memory in sent:
            assert len(memory) <= 600, len(memory)
            assert "- Preference 0:" in memory and "- Fact 0:" in memory  # both documents, fairly shared
            assert all(line in stored or line.startswith("[") for line in memory.splitlines())  # whole lines
