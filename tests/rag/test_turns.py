"""Retrieval in real turns: the right chunk reaches the model's request; filler turns retrieve nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import tone_driven
from tests.fakes.openai_fake import FakeOpenAI
from tests.pipeline.conftest import ScriptedStt
from tests.rag.conftest import CORPUS
from tests.speech import silence, tone
from voicegate.internal.config import load_config
from voicegate.internal.event_envelope import CollectingSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.llm.openai import OpenAIChatModel
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.internal.rag import build_store, ingest_files
from voicegate.server.gateway import Gateway

pytestmark = pytest.mark.slow


async def rag_gateway(tmp_path: Path, db: str, fake_url: str, stt: Any, prefetch: bool = False) -> Gateway:
    config = load_config(None)
    config.server.data_dir = str(tmp_path / "data")
    config.sip.enabled = False
    config.pipeline.greeting = ""
    config.pipeline.rag_prefetch = prefetch
    tone_driven(config)
    config.rag.provider = "pgvector"
    config.pgvector.connection_string = db
    model = OpenAIChatModel(config.openai, base_url=fake_url + "/v1", api_key="k")
    gateway = Gateway(config, stt=stt, model=model)
    await gateway.start()
    paths = []
    for name, text in CORPUS.items():
        path = tmp_path / name
        path.write_text(text)
        paths.append(path)
    from voicegate.internal.rag.embedding import WordLlamaEmbedder

    store = build_store(config, gateway.database)
    await ingest_files(store, WordLlamaEmbedder(), paths, config.rag.chunk_size, config.rag.chunk_overlap)
    await store.aclose()
    return gateway


async def ask(gateway: Gateway, *texts: str) -> None:
    assert gateway.sessions is not None
    session = await gateway.open_session(CallerIdentity.anonymous(), "talk")
    pipeline = gateway.new_pipeline(session, 16000, CollectingSink())
    async with LocalCall(pipeline, speed=4.0) as call:
        for text in texts:
            pipeline.submit_text(text)
            await call.wait_agent_quiet(100)
    await gateway.sessions.end(session, "done")


async def test_a_question_gets_the_right_chunk_and_filler_gets_none(tmp_path: Path, fresh_db: str) -> None:
    async with FakeOpenAI() as fake:
        gateway = await rag_gateway(tmp_path, fresh_db, fake.url, ScriptedStt([]))
        try:
            await ask(gateway, "when do you open on sunday", "okay thanks")
        finally:
            await gateway.stop()
    question, filler = (request["messages"][0]["content"] for request in fake.requests)
    assert "Retrieved knowledge" in question and "Sunday from 11am to 3pm" in question
    knowledge = question.split("Retrieved knowledge", 1)[1]
    assert knowledge.index("Sunday") < knowledge.index("Refund") if "Refund" in knowledge else True
    assert "Retrieved knowledge" not in filler


async def test_prefetch_during_the_merge_window_feeds_the_turn(tmp_path: Path, fresh_db: str) -> None:
    async with FakeOpenAI() as fake:
        stt = ScriptedStt(["where can I park my car"])
        gateway = await rag_gateway(tmp_path, fresh_db, fake.url, stt, prefetch=True)
        try:
            assert gateway.sessions is not None
            session = await gateway.open_session(CallerIdentity.anonymous(), "talk")
            pipeline = gateway.new_pipeline(session, 16000, CollectingSink())
            async with LocalCall(pipeline, speed=2.0) as call:
                call.say(silence(200) + tone(600) + silence(200))
                await call.wait_caller_done()
                await call.wait_agent_quiet(300)
            await gateway.sessions.end(session, "done")
        finally:
            await gateway.stop()
    (request,) = fake.requests
    assert "Mill Street" in request["messages"][0]["content"]
