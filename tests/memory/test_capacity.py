"""Memory that keeps what matters over many calls: facts above the digests, digests rolling off first,
forgetting that reaches the digests, temporary requests that stay temporary, and every session flushed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_fake import FakeOpenAI
from tests.memory.conftest import base_config, make_runtime
from tests.memory.test_calls import agent_lines, call, documents
from tests.memory.test_learning import RecordingProvider
from tests.pipeline.conftest import ScriptedStt
from voicegate.internal.conversation.past_calls import DIGEST_HEADING
from voicegate.internal.event_envelope import CollectingSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.llm.openai import OpenAIChatModel
from voicegate.internal.memory.digest import merge_digest, split_document
from voicegate.internal.memory.provider import ChangeContext, ProviderCapabilities
from voicegate.internal.memory.runtime import EditRejected, FrontendMemoryRuntime
from voicegate.internal.memory.tool import MEMORY_TOOL_DESCRIPTION
from voicegate.internal.pipeline.context import (
    ASSISTANT_PROFILE_HEADING,
    BUILTIN_PROMPT,
    ContextLayers,
    build_system_context,
)
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.server.gateway import Gateway

SAM = CallerIdentity("sip", "+15551234567", "trusted peer")
SOURCES = ("tool", "api", "reconciliation")


def owner_of(runtime: FrontendMemoryRuntime) -> str:
    owner = runtime.owner_key(SAM)
    assert owner is not None
    return owner


async def test_twenty_calls_of_digests_never_cost_a_fact(provider: Any, tmp_path: Path) -> None:
    runtime = make_runtime(provider, tmp_path, max_chars=2000)
    owner = owner_of(runtime)
    facts: list[str] = []
    for n in range(20):
        summary = f"call {n}: " + "the caller asked about an order and a refund and a delivery slot " * 3
        summary = summary[:200]
        await runtime.set_document(owner, "memory", "", ChangeContext("digest", f"s{n}"),
                                   transform=lambda current, s=summary: merge_digest(current.content, s, 2000))
        fact = f"- Fact {n}: the caller's reference number {n} is for the blue kettle."
        outcome = await runtime.edit(owner, "memory", "append", content=fact,
                                     context=ChangeContext(SOURCES[n % 3], f"s{n}"))  # type: ignore[arg-type]
        assert outcome.changed, f"remembering fact {n} was refused"
        facts.append(fact)
    content = (await runtime.latest(owner))["memory"].content
    head, calls = split_document(content)
    assert head.splitlines() == facts  # every fact, in order, above the digests
    assert calls and len(content) <= 2000  # the newest digests that fit beside them
    assert calls[0].split(": ", 1)[1].startswith("call 19")


async def test_a_fact_is_refused_only_when_the_facts_alone_do_not_fit(provider: Any, tmp_path: Path) -> None:
    runtime = make_runtime(provider, tmp_path, max_chars=300)
    owner = owner_of(runtime)
    await runtime.set_document(owner, "memory", "", ChangeContext("digest", "s0"),
                               transform=lambda current: merge_digest(current.content, "x" * 200, 300))
    for n in range(3):
        await runtime.edit(owner, "memory", "append", content=f"- Fact number {n} is worth keeping for good.",
                           context=ChangeContext("tool"))
    assert DIGEST_HEADING not in (await runtime.latest(owner))["memory"].content  # the digest made room
    with pytest.raises(EditRejected) as refused:
        await runtime.edit(owner, "memory", "append", content="- " + "A very long fact. " * 12,
                           context=ChangeContext("tool"))
    assert refused.value.code == "too_long" and "facts alone" in refused.value.message


async def test_removing_a_fact_removes_the_call_lines_that_state_it(provider: Any, tmp_path: Path) -> None:
    runtime = make_runtime(provider, tmp_path)
    owner = owner_of(runtime)
    await runtime.edit(owner, "memory", "append", content="- The caller has a dog.\n- The caller likes green tea.",
                       context=ChangeContext("tool"))
    for summary in ("the caller said \u201cmy dogs bark at the postman\u201d", "asked about green tea prices"):
        await runtime.set_document(owner, "memory", "", ChangeContext("digest"),
                                   transform=lambda current, s=summary: merge_digest(current.content, s, 2000))
    await runtime.edit(owner, "memory", "replace", old_text="- The caller has a dog.\n", new_text="",
                       context=ChangeContext("tool"))
    content = (await runtime.latest(owner))["memory"].content
    assert "dog" not in content.lower()
    assert "green tea" in content.split(DIGEST_HEADING)[1]  # a line about something else stays


def test_the_assistant_profile_is_labelled_and_below_the_callers_preferences() -> None:
    system = build_system_context(ContextLayers(policy="POLICY", persona="You are Skiff, a cheerful concierge.",
                                                assistant_profile="Speak formally.",
                                                memory_context="## Caller preferences\n<caller_preferences>\n"
                                                               "- Be casual.\n</caller_preferences>"))
    assert system.index("POLICY") < system.index("<caller_preferences>") < system.index(ASSISTANT_PROFILE_HEADING)
    assert system.index(ASSISTANT_PROFILE_HEADING) < system.index("You are Skiff")  # the persona is profile
    assert "override" in ASSISTANT_PROFILE_HEADING


def test_temporary_requests_are_for_this_turn_in_the_policy_and_the_tool() -> None:
    assert "just this once" in BUILTIN_PROMPT.read_text().lower()
    assert "just this once" in MEMORY_TOOL_DESCRIPTION.lower()


@pytest.fixture
async def offline_gateway(tmp_path: Path) -> Any:
    config = base_config(tmp_path)
    config.sip.enabled = False
    config.memory.enabled = True
    config.memory.provider = "memory"
    gateway = Gateway(config, stt=ScriptedStt([]))
    await gateway.start()
    yield gateway
    await gateway.stop()


async def test_just_this_once_is_not_stored(offline_gateway: Gateway) -> None:
    _, sink = await call(offline_gateway, SAM, "just this once keep it short", "who are you")
    assert agent_lines(sink)[1] == "Okay, short it is, just this time."
    assert (await documents(offline_gateway, SAM))["user"] == ""
    await call(offline_gateway, SAM, "keep your answers short from now on")
    assert (await documents(offline_gateway, SAM))["user"] == "- Keep replies short."


async def test_forget_that_reaches_every_line_the_model_sees(offline_gateway: Gateway) -> None:
    await call(offline_gateway, SAM, "remember that I have a dog named Rex", "remember that I like green tea")
    _, sink = await call(offline_gateway, SAM, "forget that I have a dog")
    assert "forgotten" in agent_lines(sink)[-1]
    async with FakeOpenAI() as fake:
        assert offline_gateway.services is not None
        offline_gateway.services.model = OpenAIChatModel(offline_gateway.config.openai,
                                                         base_url=fake.url + "/v1", api_key="k")
        await call(offline_gateway, SAM, "hello")
        system = fake.requests[-1]["messages"][0]["content"]
    assert "green tea" in system
    assert "dog" not in system.lower() and "rex" not in system.lower()


async def test_a_silent_call_still_flushes_and_ends_the_audio_stream(tmp_path: Path) -> None:
    provider = RecordingProvider(ProviderCapabilities(session_observation=True, audio_stream_observation=True))
    config = base_config(tmp_path)
    config.sip.enabled = False
    config.memory.enabled = True
    gateway = Gateway(config, stt=ScriptedStt([]), memory_provider=provider)
    await gateway.start()
    try:
        assert gateway.sessions is not None and gateway.session_memory is not None
        session = await gateway.open_session(CallerIdentity("jwt", "alice"), "talk")
        pipeline = gateway.new_pipeline(session, 16000, CollectingSink())
        async with LocalCall(pipeline, speed=4.0) as live:
            await live.wait_agent_quiet(100)  # the caller says nothing at all
        await gateway.sessions.end(session, "hangup")
        await gateway.sessions.drain()
        await gateway.session_memory.drain(10)
    finally:
        await gateway.stop()
    assert provider.calls.count("flush") == 1
    assert provider.audio[0] == "session_start" and provider.audio[-1] == "session_end"
