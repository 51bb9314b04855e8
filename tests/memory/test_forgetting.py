"""Forgetting reaches everything that could say a removed fact again: the caller's stored session
digests (what `recall` answers from), the digest of the call that forgot it, and reconciliation."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_fake import FakeOpenAI
from tests.memory.conftest import RETENTION_S, base_config, make_runtime
from tests.memory.test_calls import agent_lines, call
from tests.pipeline.conftest import ScriptedStt
from voicegate.internal.config import load_config
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.llm.openai import OpenAIChatModel
from voicegate.internal.memory.digest import forgotten_words
from voicegate.internal.memory.outbox import HangupWrite
from voicegate.internal.memory.provider import ChangeContext, ChangeSource
from voicegate.internal.memory.reconcile import Reconciler, SessionDigestRecorder, fallback_digest
from voicegate.internal.memory.records import SessionDigest
from voicegate.server.gateway import Gateway

OWNER = "ab" * 32
SAM = CallerIdentity("sip", "+15551234567", "trusted peer")
FACTS = "- I have diabetes.\n- The caller's name is Sam.\n"


def stated(digests: list[SessionDigest]) -> str:
    """Everything the digests say, lower-cased."""
    return json.dumps([[d.topics, d.gist] for d in digests]).lower()


def audit_lines(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "memory-audit.jsonl").read_text().splitlines()]


def test_the_words_an_edit_forgets_are_those_of_the_facts_it_removed_less_what_it_still_says() -> None:
    assert forgotten_words(FACTS, "- The caller's name is Sam.\n") == {"diabetes"}
    assert forgotten_words("- I have diabetes and a dog.\n", "- I have a dog.\n") == {"diabetes"}
    assert forgotten_words(FACTS, FACTS + "- The caller likes tea.\n") == set()  # an append forgets nothing


@pytest.mark.parametrize("source", ["tool", "api"])
async def test_forgetting_a_fact_scrubs_it_from_the_callers_session_digests(provider: Any, tmp_path: Path,
                                                                            source: ChangeSource) -> None:
    runtime = make_runtime(provider, tmp_path)
    context = ChangeContext("digest", "s0")
    await runtime.edit(OWNER, "memory", "append", content=FACTS.strip(), context=ChangeContext("api"))
    for digest in (SessionDigest("s1", ["diabetes", "billing"], "I was diagnosed with diabetes", 1.0),
                   SessionDigest("s2", ["Diabetes"], "diabetes check-up", 2.0),
                   SessionDigest("s3", ["billing"], "asked about a bill", 3.0)):
        await runtime.add_session_digest(OWNER, digest, RETENTION_S, context)
    assert "diabetes" in stated(await runtime.session_digests(OWNER, 10))

    outcome = await runtime.edit(OWNER, "memory", "replace", old_text="- I have diabetes.\n", new_text="",
                                 context=ChangeContext(source, "s9"))  # the tool's or a PATCH's replace

    assert outcome.changed and outcome.forgotten == {"diabetes"}
    left = await runtime.session_digests(OWNER, 10)
    assert "diabet" not in stated(left)
    # A digest keeps what does not state the fact; one left with nothing is gone.
    assert [(d.session_id, d.topics, d.gist) for d in left] == [("s3", ["billing"], "asked about a bill"),
                                                                ("s1", ["billing"], "")]
    scrubbed = [e for e in audit_lines(tmp_path) if e["operation"] == "scrub_session_digests"]
    assert [(e["source"], e["outcome"], e["digests"]) for e in scrubbed] == [(source, "applied", 2)]
    assert "diabetes" not in (tmp_path / "memory-audit.jsonl").read_text()  # a count, never text


async def test_a_provider_without_the_scrub_still_forgets_in_the_document(tmp_path: Path) -> None:
    class Plain:  # a v1-style provider: no session digests, no scrub
        def __init__(self) -> None:
            from voicegate.internal.memory.providers.inmemory import InMemoryProvider

            self.inner = InMemoryProvider(RETENTION_S)
            self.describe, self.list, self.apply = self.inner.describe, self.inner.list, self.inner.apply

    runtime = make_runtime(Plain(), tmp_path)
    await runtime.edit(OWNER, "memory", "append", content=FACTS.strip(), context=ChangeContext("api"))
    outcome = await runtime.edit(OWNER, "memory", "replace", old_text="- I have diabetes.\n", new_text="",
                                 context=ChangeContext("api"))
    assert outcome.changed and outcome.forgotten == {"diabetes"}
    assert not any(e["operation"] == "scrub_session_digests" for e in audit_lines(tmp_path))


def hangup(**fields: Any) -> HangupWrite:
    return HangupWrite(owner=OWNER, session_id="s1", transport="sip", epoch=0, steps=["session_digest"], **fields)


def test_the_keyword_digest_of_a_call_that_forgot_something_does_not_state_it() -> None:
    call = hangup(said=["I was diagnosed with diabetes last year", "please forget that I have diabetes",
                        "also I moved to Berlin"], forgotten=["diabetes"])
    digest = fallback_digest(call)
    assert digest.gist == "also I moved to Berlin" and "diabetes" not in digest.topics
    assert fallback_digest(hangup(said=["forget my diabetes"], forgotten=["diabetes"])).gist == "a short call"


def openai_model(fake: FakeOpenAI) -> OpenAIChatModel:
    return OpenAIChatModel(load_config(None).openai, base_url=fake.url + "/v1", api_key="sk-test")


async def test_the_model_digest_of_a_call_that_forgot_something_does_not_state_it(tmp_path: Path) -> None:
    from voicegate.internal.memory.providers.inmemory import InMemoryProvider

    runtime = make_runtime(InMemoryProvider(RETENTION_S), tmp_path, session_digests=True)
    transcript = ("Caller: I was diagnosed with diabetes last year\nAgent: Noted.\n"
                  "Caller: actually please forget that I have diabetes\nCaller: and I moved to Berlin\n")
    async with FakeOpenAI() as fake:
        fake.script_reply(json.dumps({"topics": ["diabetes diagnosis", "moving to Berlin"],
                                      "gist": "Caller has diabetes and moved"}))
        model = openai_model(fake)
        try:
            await SessionDigestRecorder(runtime, model)(hangup(transcript=transcript, forgotten=["diabetes"],
                                                               said=["I was diagnosed with diabetes last year",
                                                                     "and I moved to Berlin"]))
        finally:
            await model.aclose()
        shown = json.dumps(fake.requests[0]["messages"])
    assert "diabetes" not in shown and "Berlin" in shown  # the model never saw the forgotten lines
    (digest,) = await runtime.session_digests(OWNER)
    assert digest.topics == ["moving to Berlin"]
    assert digest.gist == "and I moved to Berlin"  # the model's gist said it: the caller's own line stands in


async def test_reconciliation_never_restates_a_fact_the_call_forgot(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    from voicegate.internal.memory.providers.inmemory import InMemoryProvider

    runtime = make_runtime(InMemoryProvider(RETENTION_S), tmp_path)
    await runtime.edit(OWNER, "memory", "append", content="- The caller's name is Sam.", context=ChangeContext("api"))
    transcript = "Caller: I have diabetes\nCaller: forget that I have diabetes\nCaller: I moved to Berlin\n"
    async with FakeOpenAI() as fake:
        fake.script_reply(json.dumps({"edits": [
            {"document": "memory", "action": "append", "content": "- The caller has diabetes."},
            {"document": "memory", "action": "replace", "old_text": "- The caller's name is Sam.",
             "new_text": "- The caller's name is Sam; Sam has Diabetes."},
            {"document": "memory", "action": "append", "content": "- The caller moved to Berlin."},
        ]}))
        model = openai_model(fake)
        try:
            with caplog.at_level(logging.INFO, logger="voicegate.internal.memory.reconcile"):
                await Reconciler(runtime, model)(hangup(transcript=transcript, forgotten=["diabetes"]))
        finally:
            await model.aclose()
        shown = json.dumps(fake.requests[0]["messages"])
    memory = (await runtime.latest(OWNER))["memory"].content
    assert memory == "- The caller's name is Sam.\n- The caller moved to Berlin."
    assert "diabetes" not in shown
    dropped = [r for r in caplog.records if "restates a fact" in r.getMessage()]
    assert len(dropped) == 2 and all("diabetes" not in r.getMessage().lower() for r in dropped)


def gateway_config(tmp_path: Path, request: pytest.FixtureRequest, provider: str) -> Any:
    config = base_config(tmp_path)
    config.sip.enabled = False
    config.memory.enabled = True
    config.memory.provider = provider
    config.memory.session_digests = True
    if provider == "pgvector":
        config.pgvector.connection_string = request.getfixturevalue("fresh_db")
    return config


@pytest.mark.parametrize("store", ["memory", "markdown", "pgvector"])
async def test_recall_no_longer_says_what_the_caller_asked_to_forget(tmp_path: Path, request: pytest.FixtureRequest,
                                                                     store: str) -> None:
    gateway = Gateway(gateway_config(tmp_path, request, store), stt=ScriptedStt([]))
    await gateway.start()
    try:
        await call(gateway, SAM, "remember that I have diabetes")
        assert gateway.memory is not None
        owner = gateway.memory.owner_key(SAM)
        assert owner is not None
        assert "diabetes" in stated(await gateway.memory.session_digests(owner, 10))
        _, sink = await call(gateway, SAM, "please forget that I have diabetes")
        assert agent_lines(sink)[-1] == "Okay, I've forgotten that."
        digests = await gateway.memory.session_digests(owner, 10)
        memory = (await gateway.memory.latest(owner))["memory"].content
    finally:
        await gateway.stop()
    assert len(digests) == 2  # both calls are still recorded ...
    assert "diabet" not in stated(digests)  # ... and neither says it any more
    assert "diabet" not in memory.lower()
