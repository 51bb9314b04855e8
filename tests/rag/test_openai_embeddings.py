"""`[rag] embedding = "openai"`: ingestion and retrieval through an OpenAI-compatible /v1/embeddings."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes.openai_fake import FakeOpenAI
from voicegate.internal.config import load_config
from voicegate.internal.db import Database
from voicegate.internal.rag import build_retriever, build_store, ingest_files
from voicegate.internal.rag.chunking import chunk_file
from voicegate.internal.rag.embedding import OpenAIEmbedder


@pytest.fixture
async def openai() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key="sk-test", embedding_dims=256) as fake:
        yield fake


async def test_chunks_are_embedded_in_batches_at_256_dimensions_and_found_again(
        openai: FakeOpenAI, database: Database, corpus: dict[str, Path]) -> None:
    config = load_config(None)
    config.rag.provider = "pgvector"
    config.rag.embedding = "openai"
    config.openai.base_url = openai.url + "/v1"
    config.openai.api_key = "sk-test"

    report = await ingest_files(build_store(config, database), OpenAIEmbedder(config.openai),
                                list(corpus.values()), 120, 20)
    assert report.added == 4
    assert len(openai.embedding_requests) == 4  # one request per file here: each is a single chunk
    assert all(r["dimensions"] == 256 and r["model"] == "text-embedding-3-small" for r in openai.embedding_requests)
    assert all(h.get("authorization") == "Bearer sk-test" for h in openai.headers)

    retriever = build_retriever(config, database)  # builds its own OpenAIEmbedder from [openai]
    assert retriever is not None
    # The fake's vectors come from a hash of the text, so only the same text is similar: search for
    # the refund chunk's exact text and it must come first.
    (refund_chunk,) = chunk_file(corpus["refunds.txt"], 120, 20)
    found = await retriever.retrieve(refund_chunk.content, 2)
    assert found[0] == refund_chunk.content
    assert openai.embedding_requests[-1]["input"] == [refund_chunk.content]


async def test_an_embedding_endpoint_failure_fails_ingestion_with_a_reason_and_retrieval_quietly(
        openai: FakeOpenAI, database: Database, corpus: dict[str, Path]) -> None:
    from voicegate.internal.rag import KnowledgeStoreError
    from voicegate.internal.rag.pgvector import PgvectorRetriever, PgvectorStore

    config = load_config(None)
    config.openai.base_url = openai.url + "/v1"
    config.openai.api_key = "sk-test"
    embedder = OpenAIEmbedder(config.openai)
    openai.error_status = 500
    with pytest.raises(KnowledgeStoreError, match="embedding failed"):
        await ingest_files(PgvectorStore(database), embedder, [corpus["hours.md"]], 120, 20)
    assert await PgvectorRetriever(database, embedder).retrieve("when do you open", 3) == []
    openai.error_status = None
    assert (await ingest_files(PgvectorStore(database), embedder, [corpus["hours.md"]], 120, 20)).added == 1
