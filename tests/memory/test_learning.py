"""Learning after a call (reconciliation, session digests, recall) and the MemoryProvider protocol v2."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.fakes.openai_fake import FakeOpenAI, ScriptedReply
from tests.memory.conftest import base_config
from tests.memory.test_calls import SAM, agent_lines, call, documents
from tests.pipeline.conftest import ScriptedStt
from tests.speech import silence, tone
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.llm.openai import OpenAIChatModel
from voicegate.internal.memory.provider import (
    MEMORY_PROVIDER_PROTOCOL_VERSION,
    ApplyResult,
    AudioEvent,
    ChangeContext,
    Exchange,
    ListOptions,
    MemoryChange,
    MemoryDocument,
    ProviderCapabilities,
    ProviderDescription,
    SessionContext,
)
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.server.gateway import Gateway


def learning_config(tmp_path: Path, fake_url: str, **memory: Any) -> Any:
    config = base_config(tmp_path)
    config.sip.enabled = False
    config.llm.provider = "local"
    config.memory.enabled = True
    config.memory.provider = "memory"
    config.memory.base_url = fake_url + "/v1"
    config.memory.api_key = "sk-reconcile"
    config.memory.model = "small-model"
    for key, value in memory.items():
        setattr(config.memory, key, value)
    return config


async def test_reconciliation_records_what_the_call_established_without_sensitive_data(tmp_path: Path) -> None:
    async with FakeOpenAI(api_key="sk-reconcile") as fake:
        fake.script_reply("Sam is moving to Berlin in May and asked for German.")  # the call's digest line
        fake.script_reply(json.dumps({"edits": [
            {"document": "memory", "action": "append", "content": "- The caller is moving to Berlin in May."},
            {"document": "user", "action": "append", "content": "- Speak German when the caller does."},
            {"document": "memory", "action": "append", "content": "- Card 4111 1111 1111 1111 on file."},
            {"document": "secrets", "action": "append", "content": "- ignored"},
        ]}))
        gateway = Gateway(learning_config(tmp_path, fake.url), stt=ScriptedStt([]))
        await gateway.start()
        try:
            await call(gateway, SAM, "I'm moving to Berlin in May", "my card is 4111 1111 1111 1111",
                       "from now on speak German when I do")
            docs = await documents(gateway, SAM)
        finally:
            await gateway.stop()
        summary, request = fake.requests[0], fake.requests[1]
    assert request["model"] == "small-model"
    assert "long-term memory" in request["messages"][0]["content"]
    assert "4111" not in json.dumps(summary)  # the summary model sees the redacted transcript too
    assert "Sam is moving to Berlin in May" in docs["memory"]  # a short call's digest: the model's summary
    sent = json.dumps(request)
    assert "4111" not in sent and "[removed]" in sent  # filtered before the model saw it
    assert "- The caller is moving to Berlin in May." in docs["memory"]
    assert "4111" not in docs["memory"]  # the model's sensitive proposal was refused at the write
    assert docs["user"] == ""  # a model after the call never writes preferences (only the caller, by the tool)
    audit = [json.loads(line) for line in (tmp_path / "data" / "memory-audit.jsonl").read_text().splitlines()]
    sources = [(e["source"], e["outcome"]) for e in audit]
    assert ("reconciliation", "applied") in sources and ("reconciliation", "refused") in sources


async def test_reconciliation_is_off_without_a_key_and_garbage_answers_change_nothing(tmp_path: Path) -> None:
    async with FakeOpenAI(api_key="sk-reconcile") as fake:
        fake.script_reply("Sam is moving to Berlin.")
        fake.script_reply("Sure! Here are some edits: none really.")
        gateway = Gateway(learning_config(tmp_path, fake.url), stt=ScriptedStt([]))
        await gateway.start()
        try:
            await call(gateway, SAM, "I'm moving to Berlin")
            docs = await documents(gateway, SAM)
        finally:
            await gateway.stop()
        assert len(fake.requests) == 2  # the digest's summary, then reconciliation
    assert "Berlin" in docs["memory"]  # only through the digest line
    assert docs["user"] == ""

    no_key = learning_config(tmp_path / "b", "http://127.0.0.1:9", api_key="")
    gateway = Gateway(no_key, stt=ScriptedStt([]))
    await gateway.start()
    try:
        assert gateway.session_memory is not None and gateway.session_memory.after_session == []
    finally:
        await gateway.stop()


async def test_session_digests_answer_recall_and_are_not_injected(tmp_path: Path) -> None:
    async with FakeOpenAI() as fake:
        fake.script_reply("Sam booked a table for four on Friday.")
        fake.script_reply(json.dumps({"edits": []}))
        fake.script_reply(json.dumps({"topics": ["table booking"], "gist": "Booked a table for four on Friday"}))
        config = learning_config(tmp_path, fake.url, session_digests=True, api_key="sk-any")
        gateway = Gateway(config, stt=ScriptedStt([]))
        await gateway.start()
        try:
            await call(gateway, SAM, "book a table for four on Friday")
            gateway.services.model = OpenAIChatModel(config.openai, base_url=fake.url + "/v1", api_key="k")
            fake.script(ScriptedReply(tool_calls=[]))
            fake._script.clear()
            fake.script_tool_call("recall", {})
            fake.script_reply("Last time you booked a table.")
            await call(gateway, SAM, "what did we talk about last time")
        finally:
            await gateway.stop()
    chat = [r for r in fake.requests if r.get("tools")]
    assert "Booked a table" not in chat[0]["messages"][0]["content"]  # digests never enter the prompt
    tool_result = next(m for m in chat[1]["messages"] if m["role"] == "tool")
    calls = json.loads(tool_result["content"])["calls"]
    assert calls[0]["gist"] == "Booked a table for four on Friday" and calls[0]["topics"] == ["table booking"]


class RecordingProvider:
    """A custom v2 provider injected at the composition root; it records every call it receives."""

    def __init__(self, capabilities: ProviderCapabilities, version: int = MEMORY_PROVIDER_PROTOCOL_VERSION) -> None:
        self.capabilities = capabilities
        self.version = version
        self.docs: dict[str, dict[str, MemoryDocument]] = {}
        self.calls: list[str] = []
        self.exchanges: list[Exchange] = []
        self.audio: list[str] = []
        self.sources: list[str] = []

    def describe(self) -> ProviderDescription:
        return ProviderDescription("recording", "Recording", self.version, self.capabilities)

    def list(self, owner_id: str, options: ListOptions) -> Sequence[MemoryDocument]:
        return [d for s, d in self.docs.get(owner_id, {}).items() if s in options.scopes]

    async def apply(self, owner_id: str, changes: Sequence[MemoryChange], context: ChangeContext) -> ApplyResult:
        self.sources.append(context.source)
        owned = self.docs.setdefault(owner_id, {})
        out = []
        for change in changes:
            document = MemoryDocument(change.scope, change.content, change.base_revision + 1)
            owned[change.scope] = document
            out.append(document)
        return ApplyResult(len(out), out)

    async def observe(self, owner_id: str, exchanges: list[Exchange], context: SessionContext) -> None:
        self.calls.append("observe")
        self.exchanges.extend(exchanges)

    async def flush(self, owner_id: str, context: SessionContext) -> None:
        self.calls.append("flush")

    def observe_audio(self, owner_id: str, event: AudioEvent, context: SessionContext) -> None:
        if event.kind != "audio" or not self.audio or self.audio[-1] != "audio":
            self.audio.append(event.kind)


async def run_provider_call(tmp_path: Path, provider: RecordingProvider) -> tuple[Gateway, list[str]]:
    config = base_config(tmp_path)
    config.sip.enabled = False
    config.memory.enabled = True
    gateway = Gateway(config, stt=ScriptedStt(["hello there"]), memory_provider=provider)
    await gateway.start()
    assert gateway.sessions is not None and gateway.session_memory is not None
    session = await gateway.open_session(CallerIdentity("jwt", "alice"), "talk")
    pipeline = gateway.new_pipeline(session, 16000, __import__("voicegate.internal.event_envelope",
                                                               fromlist=["CollectingSink"]).CollectingSink())
    async with LocalCall(pipeline, speed=4.0) as live:
        await live.wait_agent_quiet(100)
        live.say(silence(200) + tone(400) + silence(100))
        await live.wait_caller_done()
        await live.wait_agent_quiet(300)
        pipeline.submit_text("remember that I like green tea")
        await live.wait_agent_quiet(100)
    await gateway.sessions.end(session, "hangup")
    await gateway.sessions.drain()
    await gateway.session_memory.drain(10)
    return gateway, provider.calls


async def test_a_v2_provider_with_every_capability_learns_on_its_own(tmp_path: Path) -> None:
    provider = RecordingProvider(ProviderCapabilities(semantic_query=False, session_observation=True,
                                                      audio_stream_observation=True))
    gateway, calls = await run_provider_call(tmp_path, provider)
    await gateway.stop()
    assert "flush" in calls and calls.count("flush") == 1
    assert [e.user for e in provider.exchanges] == ["hello there", "remember that I like green tea"]
    assert provider.audio[0] == "session_start" and provider.audio[-1] == "session_end"
    assert {"audio", "speech_start", "speech_end"} <= set(provider.audio)
    assert "digest" not in provider.sources  # never two learners: the built-in digest stays off
    assert "tool" in provider.sources  # explicit edits still reach it through apply()


async def test_capabilities_off_means_those_methods_are_never_called(tmp_path: Path) -> None:
    provider = RecordingProvider(ProviderCapabilities())
    gateway, calls = await run_provider_call(tmp_path, provider)
    await gateway.stop()
    assert calls == [] and provider.audio == []
    assert "digest" in provider.sources  # the built-in digest writes through apply() instead


async def test_a_version_1_provider_keeps_working(tmp_path: Path) -> None:
    provider = RecordingProvider(ProviderCapabilities(session_observation=True, audio_stream_observation=True),
                                 version=1)
    gateway, calls = await run_provider_call(tmp_path, provider)
    await gateway.stop()
    assert calls == [] and provider.audio == []  # v1: every capability is off, whatever it claims
    owner = next(iter(provider.docs))
    assert "green tea" in provider.docs[owner]["memory"].content


async def test_the_offline_agent_forgets_on_request(tmp_path: Path) -> None:
    config = base_config(tmp_path)
    config.sip.enabled = False
    config.memory.enabled = True
    config.memory.provider = "memory"
    gateway = Gateway(config, stt=ScriptedStt([]))
    await gateway.start()
    try:
        await call(gateway, SAM, "remember that I like green tea", "remember that I have a dog")
        _, sink = await call(gateway, SAM, "forget that I have a dog", "what do you remember about me")
        docs = await documents(gateway, SAM)
    finally:
        await gateway.stop()
    assert "dog" not in docs["memory"].split("## Recent calls")[0]
    assert "green tea" in docs["memory"]
    assert agent_lines(sink)[1] == "Okay, I've forgotten that."
    assert "I like green tea" in agent_lines(sink)[2]
