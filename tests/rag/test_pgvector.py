"""Ingest a small corpus into a real PostgreSQL with pgvector, then retrieve from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from voicegate.internal.config import load_config
from voicegate.internal.db import Database
from voicegate.internal.rag import KnowledgeStoreError, build_retriever, build_store, ingest_files, source_name
from voicegate.internal.rag.embedding import WordLlamaEmbedder
from voicegate.internal.rag.pgvector import PgvectorRetriever, PgvectorStore

SIZE, OVERLAP = 120, 20


def documented_custom_table_ddl() -> str:
    """The CREATE TABLE docs/agent-runtime.md gives for a custom `[pgvector] table` (named my_knowledge)."""
    doc = (REPO / "docs" / "agent-runtime.md").read_text()
    block = doc.split("```sql\n-- a custom [pgvector] table", 1)[1].split("```", 1)[0]
    return block.split("\n", 1)[1]  # past the rest of the comment line


async def rows(database: Database, table: str = "rag_documents") -> list[tuple[Any, ...]]:
    async with database.pool.connection() as conn:
        cursor = await conn.execute(
            f"SELECT source, chunk_index, id, content, created_at FROM {table} ORDER BY source, chunk_index")
        return await cursor.fetchall()


async def test_the_opening_hours_chunk_answers_when_do_you_open_on_sunday(
        database: Database, embedder: WordLlamaEmbedder, corpus: dict[str, Path]) -> None:
    report = await ingest_files(PgvectorStore(database), embedder, list(corpus.values()), SIZE, OVERLAP)
    assert report.added == 4 and report.unchanged == 0 and not report.skipped
    retriever = PgvectorRetriever(database, embedder)

    hours = await retriever.retrieve("when do you open on sunday", top_k=3)
    assert len(hours) == 3
    assert hours[0].startswith("Opening hours\n") and "Sunday from 11am to 3pm" in hours[0]
    assert "Free parking" in (await retriever.retrieve("where can I park my car", 1))[0]
    assert "full refund" in (await retriever.retrieve("can I get my money back", 1))[0]
    assert "Espresso" in (await retriever.retrieve("how much is an espresso", 1))[0]


async def test_min_score_drops_weak_matches(database: Database, embedder: WordLlamaEmbedder,
                                            corpus: dict[str, Path]) -> None:
    await ingest_files(PgvectorStore(database), embedder, list(corpus.values()), SIZE, OVERLAP)
    strict = PgvectorRetriever(database, embedder, min_score=0.4)
    found = await strict.retrieve("when do you open on sunday", top_k=4)
    assert len(found) == 1 and found[0].startswith("Opening hours")
    assert await PgvectorRetriever(database, embedder, min_score=0.99).retrieve("parking", 4) == []


async def test_re_ingesting_unchanged_files_changes_nothing(database: Database, embedder: WordLlamaEmbedder,
                                                           corpus: dict[str, Path]) -> None:
    store = PgvectorStore(database)
    await ingest_files(store, embedder, list(corpus.values()), SIZE, OVERLAP)
    before = await rows(database)
    again = await ingest_files(store, embedder, list(corpus.values()), SIZE, OVERLAP)
    assert (again.added, again.unchanged, again.removed) == (0, 4, 0)
    assert not any(result.changed for result in again.results)
    assert await rows(database) == before  # same ids, same timestamps: nothing was rewritten


async def test_a_changed_file_replaces_its_chunks_and_leaves_the_others_alone(
        database: Database, embedder: WordLlamaEmbedder, corpus: dict[str, Path]) -> None:
    store = PgvectorStore(database)
    await ingest_files(store, embedder, list(corpus.values()), SIZE, OVERLAP)
    before = await rows(database)
    corpus["hours.md"].write_text("# Opening hours\n\nFrom June we open every day, Sunday included, 8am to 8pm.\n")

    report = await ingest_files(store, embedder, [corpus["hours.md"]], SIZE, OVERLAP)
    assert (report.added, report.unchanged, report.removed) == (1, 0, 1)
    after = await rows(database)
    hours = source_name(corpus["hours.md"])
    assert [r for r in after if r[0] != hours] == [r for r in before if r[0] != hours]
    assert [r[3] for r in after if r[0] == hours] == [
        "Opening hours\nFrom June we open every day, Sunday included, 8am to 8pm."]
    found = await PgvectorRetriever(database, embedder).retrieve("when do you open on sunday", 1)
    assert "8am to 8pm" in found[0]


async def test_a_longer_file_reuses_the_embeddings_of_chunks_it_kept(
        database: Database, corpus: dict[str, Path], tmp_path: Path) -> None:
    class CountingEmbedder(WordLlamaEmbedder):
        def __init__(self) -> None:
            super().__init__()
            self.texts: list[str] = []

        async def embed(self, texts: list[str]) -> list[Any]:
            self.texts += texts
            return await super().embed(texts)

    counting = CountingEmbedder()
    path = tmp_path / "long.txt"
    path.write_text(" ".join(f"w{i}" for i in range(25)))
    store = PgvectorStore(database)
    first = await ingest_files(store, counting, [path], 10, 0)
    assert first.added == 3 and len(counting.texts) == 3
    path.write_text(" ".join(f"w{i}" for i in range(35)))  # chunk 2 grows, chunk 3 is new
    second = await ingest_files(store, counting, [path], 10, 0)
    assert (second.added, second.unchanged, second.removed) == (2, 2, 1)
    assert len(counting.texts) == 5  # only the two new texts were embedded
    path.write_text(" ".join(f"w{i}" for i in range(15)))
    third = await ingest_files(store, counting, [path], 10, 0)
    assert (third.added, third.unchanged, third.removed) == (1, 1, 3)
    assert [r[1] for r in await rows(database)] == [0, 1]


async def test_deleting_a_source_removes_only_its_chunks(database: Database, embedder: WordLlamaEmbedder,
                                                         corpus: dict[str, Path]) -> None:
    store = PgvectorStore(database)
    await ingest_files(store, embedder, list(corpus.values()), SIZE, OVERLAP)
    assert await store.delete(source_name(corpus["parking.md"])) == 1
    assert await store.delete(source_name(corpus["parking.md"])) == 0
    listed = await store.sources()
    assert sorted(s.source for s in listed) == sorted(source_name(p) for n, p in corpus.items() if n != "parking.md")
    assert all(s.chunks == 1 and s.ingested_at is not None for s in listed)
    found = await PgvectorRetriever(database, embedder).retrieve("where can I park", 3)
    assert not any("parking" in chunk.lower() for chunk in found)


async def test_unreadable_files_are_skipped_and_the_rest_ingested(
        database: Database, embedder: WordLlamaEmbedder, corpus: dict[str, Path], tmp_path: Path) -> None:
    paths = [corpus["hours.md"], tmp_path / "missing.txt", tmp_path / "deck.pptx"]
    (tmp_path / "deck.pptx").write_bytes(b"x")
    report = await ingest_files(PgvectorStore(database), embedder, paths, SIZE, OVERLAP)
    assert report.added == 1
    assert len(report.skipped) == 2 and "no such file" in report.skipped[0]


async def test_a_custom_table_needs_its_ddl_and_a_missing_one_is_named(
        database: Database, embedder: WordLlamaEmbedder, corpus: dict[str, Path], tmp_path: Path) -> None:
    missing = PgvectorStore(database, "kb_chunks")
    with pytest.raises(KnowledgeStoreError, match=r"kb_chunks.*does not exist.*docs/agent-runtime\.md"):
        await ingest_files(missing, embedder, [corpus["hours.md"]], SIZE, OVERLAP)
    assert await PgvectorRetriever(database, embedder, "kb_chunks").retrieve("when do you open", 3) == []

    async with database.pool.connection() as conn:
        await conn.execute(documented_custom_table_ddl().replace("my_knowledge", "kb_chunks"))
    await ingest_files(PgvectorStore(database, "kb_chunks"), embedder, [corpus["hours.md"]], SIZE, OVERLAP)
    found = await PgvectorRetriever(database, embedder, "kb_chunks").retrieve("when do you open on sunday", 3)
    assert len(found) == 1 and "Sunday" in found[0]


async def test_retrieval_through_the_config_seam(database: Database, embedder: WordLlamaEmbedder,
                                                 corpus: dict[str, Path]) -> None:
    config = load_config(None)
    config.rag.provider = "pgvector"
    config.rag.top_k = 2
    await ingest_files(build_store(config, database), embedder, list(corpus.values()), SIZE, OVERLAP)
    retriever = build_retriever(config, database, embedder)
    assert retriever is not None
    found = await retriever.retrieve("is there parking", config.rag.top_k)
    assert len(found) == 2 and "parking" in found[0].lower()
    await retriever.aclose()


async def test_a_top_k_beyond_the_hnsw_search_width_still_returns_that_many(
        database: Database, embedder: WordLlamaEmbedder, tmp_path: Path) -> None:
    path = tmp_path / "many.csv"
    path.write_text("item,price\n" + "".join(f"thing {i},{i}.00\n" for i in range(60)))
    await ingest_files(PgvectorStore(database), embedder, [path], 4, 0)
    assert len(await PgvectorRetriever(database, embedder).retrieve("price of a thing", 50)) == 50


async def test_retrieval_from_a_closed_database_is_empty_not_an_error(
        fresh_db: str, embedder: WordLlamaEmbedder, tmp_path: Path) -> None:
    from voicegate.internal.config.providers import PgvectorConfig

    closed = Database(PgvectorConfig(connection_string=fresh_db), tmp_path)
    assert await PgvectorRetriever(closed, embedder).retrieve("parking", 3) == []


async def test_switching_the_embedding_model_re_embeds_every_chunk_on_the_next_ingest(
        database: Database, embedder: WordLlamaEmbedder, corpus: dict[str, Path]) -> None:
    class OtherModel(WordLlamaEmbedder):
        model_name = "another-model"

    store = PgvectorStore(database)
    await ingest_files(store, embedder, list(corpus.values()), SIZE, OVERLAP)
    assert {s.embedders for s in await store.sources()} == {"wordllama/l2_supercat"}
    switched = await ingest_files(store, OtherModel(), list(corpus.values()), SIZE, OVERLAP)
    assert (switched.added, switched.unchanged, switched.removed) == (4, 0, 4)
    assert {s.embedders for s in await store.sources()} == {"wordllama/another-model"}
