"""A fact removed while a call of its caller is live stays removed, whoever removed it.

The call's hang-up writers (its digest line, its session digest, reconciliation) were told only of what
the call's own memory tool removed. Now each call keeps the fact lines it saw, and every hang-up step
judges them against the document as it is when the step lands: a fact removed through the API, the
page, the CLI or another node (during the call or after it) is not quoted again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_fake import FakeOpenAI
from tests.memory.conftest import RETENTION_S, base_config, make_runtime
from tests.pipeline.conftest import ScriptedStt
from voicegate.internal.config import load_config
from voicegate.internal.conversation.transcript import TranscriptEntry
from voicegate.internal.event_envelope import CollectingSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.llm.openai import OpenAIChatModel
from voicegate.internal.memory.digest import call_summary, no_longer_stated, still_seen, usable_summary
from voicegate.internal.memory.outbox import HangupWrite
from voicegate.internal.memory.provider import ChangeContext, MemoryDocument
from voicegate.internal.memory.providers.inmemory import InMemoryProvider
from voicegate.internal.memory.reconcile import Reconciler, SessionDigestRecorder
from voicegate.internal.memory.runtime import FrontendMemoryRuntime
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.server.gateway import Gateway

ALICE = CallerIdentity("jwt", "alice", "jwt")
LINE = "- The caller's locker code word is zanzibar."
FACTS = f"- The caller's name is Alice.\n{LINE}\n"


def test_a_fact_the_call_saw_that_is_gone_is_not_to_be_restated() -> None:
    seen = ["- The caller's name is Alice.", LINE.strip(), "- The caller has a dog and a cat."]
    now = "- The caller's name is Alice.\n- The caller has a dog.\n\n## Recent calls\n- 2026-12-01: zanzibar\n"
    # The locker line went (its word); the pet line was corrected: "dog" is still stated, "cat" is not.
    assert no_longer_stated(seen, now) == {"locker", "code", "word", "zanzibar", "cat"}
    assert no_longer_stated(seen, "\n".join(seen)) == set()
    entry = HangupWrite("o", "s", "talk", 0, ["digest"], forgotten=["pizza"], seen=seen)
    assert entry.forgotten_against(MemoryDocument("memory", now)) == {"pizza", "locker", "code", "word",
                                                                        "zanzibar", "cat"}
    # An entry written by an older version (no `seen`) still reads, and forgets what it was told.
    old = HangupWrite.from_json(json.dumps({"owner": "o", "session_id": "s", "transport": "talk", "epoch": 0,
                                            "steps": ["digest"], "forgotten": ["pizza"]}))
    assert old.forgotten_against(MemoryDocument("memory", now)) == {"pizza"}


def test_a_call_line_the_call_saw_that_is_gone_is_not_to_be_restated_either() -> None:
    """An operator removes the "Recent calls" line that mentions the caller's plan; the call's
    hang-up must not say it again. Its date is when, not what: other dates are not forgotten."""
    gold = "- 2026-12-01: the caller said \u201cI'm on the gold plan\u201d"
    seen = ["- The caller's name is Alice.", gold, "- 2026-11-20: the caller asked about opening hours"]
    now = "- The caller's name is Alice.\n\n## Recent calls\n- 2026-11-20: the caller asked about opening hours\n"
    assert no_longer_stated(seen, now) == {"gold"}
    # What the call's own digest line pushed out of the bounded section is not counted once judged.
    assert still_seen(seen, now) == [seen[0], seen[2]]


def test_a_summary_that_echoes_the_script_is_no_digest_line() -> None:
    """A model that echoes "Agent: ... Caller: ..." wrote no summary; the caller's own words,
    quoted and labelled, stand in for it, never the agent's."""
    assert not usable_summary("The caller said: Agent: Hello, this is your assistant. Caller: I'm on the gold plan.")
    assert not usable_summary("Caller: hi\nAgent: hello")
    assert not usable_summary("   ")
    assert usable_summary("The caller, on the gold plan, asked to move their delivery to Friday.")
    assert usable_summary("The caller said they would call back.")
    entries = [TranscriptEntry("assistant", "Hello, this is your assistant.", 0.0),
               TranscriptEntry("user", "I'm on the gold plan.", 1.0)]
    line = call_summary(entries, "Agent: Hello, this is your assistant. Caller: I'm on the gold plan.")
    assert line == "the caller said \u201cI'm on the gold plan.\u201d"


def gateway_config(tmp_path: Path, request: pytest.FixtureRequest, store: str) -> Any:
    config = base_config(tmp_path)
    config.sip.enabled = False
    config.memory.enabled = True
    config.memory.provider = store
    config.memory.session_digests = True
    if store == "pgvector":
        config.pgvector.connection_string = request.getfixturevalue("fresh_db")
    return config


@pytest.mark.parametrize("store", ["memory", "markdown", "pgvector"])
async def test_a_fact_removed_through_the_api_during_a_call_is_not_quoted_at_its_hang_up(
        tmp_path: Path, request: pytest.FixtureRequest, store: str) -> None:
    gateway = Gateway(gateway_config(tmp_path, request, store), stt=ScriptedStt([]))
    await gateway.start()
    try:
        memory, sessions = gateway.memory, gateway.session_memory
        assert memory is not None and sessions is not None and gateway.sessions is not None
        owner = memory.owner_key(ALICE)
        assert owner is not None
        await memory.edit(owner, "memory", "append", content=FACTS.strip(), context=ChangeContext("api"))
        session = await gateway.open_session(ALICE, "webrtc")
        pipeline = gateway.new_pipeline(session, 16000, CollectingSink())
        async with LocalCall(pipeline, speed=30.0) as live:
            await live.wait_agent_quiet(100)
            for said in ("my locker code word zanzibar still works", "I also like green tea"):
                pipeline.submit_text(said)
                await live.wait_agent_quiet(100)
            # The page's memory panel (PATCH /api/memory) removes the line while the call is live.
            removed = await memory.edit(owner, "memory", "replace", old_text=LINE, new_text="",
                                        context=ChangeContext("api"))
            assert removed.changed
        await gateway.sessions.end(session, "caller hung up")
        await gateway.sessions.drain()
        await sessions.drain(30)
        document = (await memory.latest(owner))["memory"].content
        digests = await memory.session_digests(owner, 10)
    finally:
        await gateway.stop()
    assert "green tea" in document  # the call was recorded ...
    assert "zanzibar" not in document.lower()  # ... without the removed fact
    assert digests and "zanzibar" not in json.dumps([[d.topics, d.gist] for d in digests]).lower()


async def test_a_fact_removed_after_the_hang_up_before_the_digest_landed_stays_removed(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    gateway = Gateway(gateway_config(tmp_path, request, "memory"), stt=ScriptedStt([]))
    await gateway.start()
    try:
        memory, sessions = gateway.memory, gateway.session_memory
        assert memory is not None and sessions is not None and gateway.sessions is not None
        owner = memory.owner_key(ALICE)
        assert owner is not None
        await memory.edit(owner, "memory", "append", content=FACTS.strip(), context=ChangeContext("api"))
        session = await gateway.open_session(ALICE, "webrtc")
        pipeline = gateway.new_pipeline(session, 16000, CollectingSink())
        async with LocalCall(pipeline, speed=30.0) as live:
            await live.wait_agent_quiet(100)
            for said in ("my locker code word zanzibar still works", "I also like green tea"):
                pipeline.submit_text(said)
                await live.wait_agent_quiet(100)
        # What the call leaves at its hang-up quotes the caller; the fact goes before that lands (a CLI
        # edit while the entry waits in the outbox of a node whose store was down, say).
        entry = sessions.hangup_write(session, owner, sessions.epoch(session))
        assert entry is not None and "zanzibar" in entry.summary
        await memory.edit(owner, "memory", "replace", old_text=LINE, new_text="", context=ChangeContext("cli"))
        await sessions._land_digest(entry)
        await gateway.sessions.end(session, "caller hung up")
        await gateway.sessions.drain()
        await sessions.drain(30)
        document = (await memory.latest(owner))["memory"].content
    finally:
        await gateway.stop()
    assert "green tea" in document and "zanzibar" not in document.lower()


OWNER = "ef" * 32
SAID = ["my locker code word zanzibar still works", "I also like green tea"]


def removed_right_after_the_first_read(runtime: FrontendMemoryRuntime) -> list[int]:
    """The runtime's first `latest()` answers the documents as they were, and the fact is removed just
    after it (another node's PATCH landing between a hang-up step's read and its write)."""
    real, reads = runtime.latest, [0]

    async def latest(owner: str) -> dict[Any, Any]:
        reads[0] += 1
        if reads[0] > 1:
            return await real(owner)
        before = await real(owner)
        await runtime.edit(owner, "memory", "replace", old_text=LINE, new_text="", context=ChangeContext("api"))
        return before

    runtime.latest = latest  # type: ignore[method-assign]
    return reads


async def test_a_removal_landing_while_the_session_digest_is_judged_makes_it_judge_again(tmp_path: Path) -> None:
    runtime = make_runtime(InMemoryProvider(RETENTION_S), tmp_path, session_digests=True)
    await runtime.edit(OWNER, "memory", "append", content=FACTS.strip(), context=ChangeContext("api"))
    reads = removed_right_after_the_first_read(runtime)
    entry = HangupWrite(OWNER, "s1", "talk", 0, ["session_digest"], said=SAID, seen=FACTS.strip().splitlines())
    await SessionDigestRecorder(runtime, None)(entry)
    (digest,) = await runtime.session_digests(OWNER)
    assert reads[0] >= 3  # judged, refused by the provider (the document moved on), judged again
    assert digest.gist == "I also like green tea" and "zanzibar" not in json.dumps(digest.topics)


async def test_a_removal_landing_while_reconciliation_runs_is_not_written_back(tmp_path: Path) -> None:
    runtime = make_runtime(InMemoryProvider(RETENTION_S), tmp_path)
    await runtime.edit(OWNER, "memory", "append", content=FACTS.strip(), context=ChangeContext("api"))
    removed_right_after_the_first_read(runtime)
    entry = HangupWrite(OWNER, "s1", "talk", 0, ["reconcile"], seen=FACTS.strip().splitlines(),
                        transcript="Caller: my locker code word zanzibar still works\nCaller: I also like green tea\n")
    async with FakeOpenAI() as fake:
        fake.script_reply(json.dumps({"edits": [
            {"document": "memory", "action": "append", "content": "- The caller's locker word is zanzibar."},
            {"document": "memory", "action": "append", "content": "- The caller likes green tea."}]}))
        model = OpenAIChatModel(load_config(None).openai, base_url=fake.url + "/v1", api_key="k")
        try:
            await Reconciler(runtime, model)(entry)
        finally:
            await model.aclose()
    memory = (await runtime.latest(OWNER))["memory"].content
    assert "likes green tea" in memory and "zanzibar" not in memory
