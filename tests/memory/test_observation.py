"""What a call hands to memory, through the real gateway: a reconnected call does not hand over its old
exchanges again, and a call in which the caller said nothing writes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.memory.conftest import base_config
from tests.memory.test_calls import SAM, memory_config
from tests.memory.test_learning import RecordingProvider
from tests.pipeline.conftest import ScriptedStt
from tests.speech import silence
from voicegate.internal.event_envelope import CollectingSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.memory.provider import ProviderCapabilities
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.internal.session import Session
from voicegate.server.gateway import Gateway

ALICE = CallerIdentity("jwt", "alice")


async def observing_gateway(tmp_path: Path, provider: Any) -> Gateway:
    config = base_config(tmp_path)
    config.sip.enabled = False
    config.memory.enabled = True
    gateway = Gateway(config, stt=ScriptedStt([]), memory_provider=provider)
    await gateway.start()
    return gateway


async def connection(gateway: Gateway, session: Session, *turns: str, quiet_ms: int = 0) -> None:
    """One transport's pipeline on `session` (a reconnect is a second one on the same session)."""
    pipeline = gateway.new_pipeline(session, 16000, CollectingSink())
    async with LocalCall(pipeline, speed=6.0) as live:
        await live.wait_agent_quiet(100)
        for text in turns:
            pipeline.submit_text(text)
            await live.wait_agent_quiet(100)
        if quiet_ms:
            live.say(silence(quiet_ms))
            await live.wait_agent_quiet(quiet_ms)


async def hang_up(gateway: Gateway, session: Session) -> None:
    assert gateway.sessions is not None and gateway.session_memory is not None
    await gateway.sessions.end(session, "caller hung up")
    await gateway.sessions.drain()
    await gateway.session_memory.drain(30)


async def test_a_reconnected_call_never_hands_its_earlier_exchanges_over_again(tmp_path: Path) -> None:
    provider = RecordingProvider(ProviderCapabilities(session_observation=True))
    gateway = await observing_gateway(tmp_path, provider)
    try:
        session = await gateway.open_session(ALICE, "talk")
        await connection(gateway, session, "I like green tea", "and I live in Lisbon")
        assert [e.user for e in provider.exchanges] == ["I like green tea", "and I live in Lisbon"]
        # The browser's connection dies; it resumes the same session (its history kept) on a new one.
        assert session.conversation.history
        await connection(gateway, session, "oolong on Sundays")
        await hang_up(gateway, session)
    finally:
        await gateway.stop()
    assert [e.user for e in provider.exchanges] == ["I like green tea", "and I live in Lisbon", "oolong on Sundays"]
    assert provider.calls.count("flush") == 1


async def test_a_silent_call_hands_no_exchange_to_a_learning_provider(tmp_path: Path) -> None:
    provider = RecordingProvider(ProviderCapabilities(session_observation=True))
    gateway = await observing_gateway(tmp_path, provider)
    try:
        session = await gateway.open_session(ALICE, "talk")
        await connection(gateway, session, quiet_ms=1500)  # the agent greets; the caller says nothing
        await hang_up(gateway, session)
    finally:
        await gateway.stop()
    assert provider.exchanges == [] and "observe" not in provider.calls
    assert provider.calls == ["flush"]  # told the session ended, as every session end is
    assert provider.sources == []  # and nothing was written


async def test_a_silent_call_writes_nothing_to_postgresql(tmp_path: Path, fresh_db: str) -> None:
    gateway = Gateway(memory_config(tmp_path, fresh_db), stt=ScriptedStt([]))
    await gateway.start()
    try:
        assert gateway.memory is not None and gateway.session_memory is not None
        session = await gateway.open_session(SAM, "talk")
        await connection(gateway, session, quiet_ms=1500)
        await hang_up(gateway, session)
        owner = gateway.memory.owner_key(SAM)
        assert owner is not None
        documents = await gateway.memory.latest(owner)
        assert all(document.revision == 0 and document.content == "" for document in documents.values())
        assert gateway.session_memory.outbox.landed == 0 and gateway.session_memory.outbox.pending == 0
    finally:
        await gateway.stop()
    audit = tmp_path / "data" / "memory-audit.jsonl"
    assert not audit.exists() or audit.read_text() == ""
