"""The Supabase provider against a local PostgREST stand-in: RPC retrieval and ingestion over HTTP."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import REPO, free_port
from tests.fakes.postgrest_fake import FakePostgrest
from voicegate.internal.config import load_config
from voicegate.internal.rag import KnowledgeStoreError, build_retriever, build_store, ingest_files, source_name
from voicegate.internal.rag.embedding import WordLlamaEmbedder
from voicegate.internal.rag.supabase import PostgrestClient, SupabaseRetriever, SupabaseStore

KEY = "service-role-key-for-tests"
SIZE, OVERLAP = 120, 20


@pytest.fixture
async def postgrest() -> AsyncIterator[FakePostgrest]:
    async with FakePostgrest(api_key=KEY) as fake:
        yield fake


@pytest.fixture
async def store(postgrest: FakePostgrest) -> AsyncIterator[SupabaseStore]:
    store = SupabaseStore(PostgrestClient(postgrest.url, KEY), "documents")
    yield store
    await store.aclose()


def retriever_for(url: str, embedder: WordLlamaEmbedder, key: str = KEY, min_score: float = 0.0) -> SupabaseRetriever:
    return SupabaseRetriever(PostgrestClient(url, key), embedder, "match_documents", min_score)


async def test_retrieval_calls_match_documents_with_the_query_embedding_and_both_key_headers(
        postgrest: FakePostgrest, store: SupabaseStore, embedder: WordLlamaEmbedder,
        corpus: dict[str, Path]) -> None:
    await ingest_files(store, embedder, list(corpus.values()), SIZE, OVERLAP)
    retriever = retriever_for(postgrest.url, embedder)
    found = await retriever.retrieve("when do you open on sunday", 2)
    await retriever.aclose()

    assert len(found) == 2 and found[0].startswith("Opening hours") and "Sunday from 11am" in found[0]
    (call,) = postgrest.rpc_requests()
    assert call.path == "/rest/v1/rpc/match_documents"
    assert set(call.body) == {"query_embedding", "match_count"} and call.body["match_count"] == 2
    assert len(call.body["query_embedding"]) == 256
    assert call.headers["apikey"] == KEY and call.headers["authorization"] == f"Bearer {KEY}"


async def test_min_score_applies_to_the_similarity_the_function_returns(
        postgrest: FakePostgrest, store: SupabaseStore, embedder: WordLlamaEmbedder,
        corpus: dict[str, Path]) -> None:
    await ingest_files(store, embedder, list(corpus.values()), SIZE, OVERLAP)
    retriever = retriever_for(postgrest.url, embedder, min_score=0.4)
    found = await retriever.retrieve("when do you open on sunday", 4)
    await retriever.aclose()
    assert len(found) == 1 and found[0].startswith("Opening hours")


@pytest.mark.parametrize("failure", ["wrong key", "server error", "unknown function", "unreachable"])
async def test_a_failed_retrieval_is_logged_and_empty(
        postgrest: FakePostgrest, embedder: WordLlamaEmbedder, caplog: pytest.LogCaptureFixture, failure: str) -> None:
    postgrest.add_row("faq", 0, "We open at nine.", [1.0] * 256)
    url, key, function = postgrest.url, KEY, "match_documents"
    if failure == "wrong key":
        key = "not-the-key"
    elif failure == "server error":
        postgrest.error_status = 503
    elif failure == "unknown function":
        function = "match_docs"
    else:
        url = f"http://127.0.0.1:{free_port()}"
    retriever = SupabaseRetriever(PostgrestClient(url, key), embedder, function)
    with caplog.at_level(logging.WARNING, logger="voicegate.internal.rag.supabase"):
        assert await retriever.retrieve("when do you open", 3) == []
    await retriever.aclose()
    assert "knowledge retrieval from Supabase failed" in caplog.text
    assert KEY not in caplog.text and "not-the-key" not in caplog.text


async def test_re_ingesting_unchanged_files_sends_no_writes(
        postgrest: FakePostgrest, store: SupabaseStore, embedder: WordLlamaEmbedder,
        corpus: dict[str, Path]) -> None:
    first = await ingest_files(store, embedder, list(corpus.values()), SIZE, OVERLAP)
    assert first.added == 4 and len(postgrest.rows) == 4
    assert {r["source"] for r in postgrest.rows} == {source_name(p) for p in corpus.values()}
    postgrest.requests.clear()
    again = await ingest_files(store, embedder, list(corpus.values()), SIZE, OVERLAP)
    assert (again.added, again.unchanged, again.removed) == (0, 4, 0)
    assert {r.method for r in postgrest.requests} == {"GET"}


async def test_a_changed_file_is_upserted_and_its_surplus_chunks_deleted(
        postgrest: FakePostgrest, store: SupabaseStore, embedder: WordLlamaEmbedder,
        corpus: dict[str, Path], tmp_path: Path) -> None:
    long = tmp_path / "long.txt"
    long.write_text(" ".join(f"w{i}" for i in range(30)))
    await ingest_files(store, embedder, [long, corpus["parking.md"]], 10, 0)
    parking_before = [dict(r) for r in postgrest.rows if r["source"] == source_name(corpus["parking.md"])]
    assert sum(r["source"] == source_name(long) for r in postgrest.rows) == 3

    long.write_text(" ".join(f"w{i}" for i in range(12)))
    report = await ingest_files(store, embedder, [long], 10, 0)
    assert (report.added, report.unchanged, report.removed) == (1, 1, 2)
    kept = sorted((r["chunk_index"], r["content"]) for r in postgrest.rows if r["source"] == source_name(long))
    assert kept == [(0, " ".join(f"w{i}" for i in range(10))), (1, "w10 w11")]
    assert [r for r in postgrest.rows if r["source"] == source_name(corpus["parking.md"])] == parking_before
    upsert = next(r for r in postgrest.requests if r.method == "POST")
    assert upsert.params["on_conflict"] == "source,chunk_index"
    assert "resolution=merge-duplicates" in upsert.headers["prefer"]


async def test_list_and_delete_sources(postgrest: FakePostgrest, store: SupabaseStore,
                                       embedder: WordLlamaEmbedder, corpus: dict[str, Path]) -> None:
    await ingest_files(store, embedder, list(corpus.values()), SIZE, OVERLAP)
    listed = await store.sources()
    assert sorted(s.source for s in listed) == sorted(source_name(p) for p in corpus.values())
    assert all(s.chunks == 1 and s.ingested_at is not None for s in listed)
    assert await store.delete(source_name(corpus["menu.csv"])) == 1
    assert await store.delete(source_name(corpus["menu.csv"])) == 0
    assert len(postgrest.rows) == 3


async def test_a_missing_table_is_named_with_what_to_do(postgrest: FakePostgrest, embedder: WordLlamaEmbedder,
                                                        corpus: dict[str, Path]) -> None:
    store = SupabaseStore(PostgrestClient(postgrest.url, KEY), "knowledge")
    with pytest.raises(KnowledgeStoreError, match=r"no table 'knowledge'.*docs/agent-runtime\.md"):
        await ingest_files(store, embedder, [corpus["hours.md"]], SIZE, OVERLAP)
    await store.aclose()


async def test_the_config_seam_builds_the_supabase_retriever_and_store(
        postgrest: FakePostgrest, embedder: WordLlamaEmbedder, corpus: dict[str, Path]) -> None:
    config = load_config(None)
    config.rag.provider = "supabase"
    config.supabase.url = postgrest.url + "/"
    config.supabase.api_key = KEY
    store = build_store(config, None)
    await ingest_files(store, embedder, list(corpus.values()), SIZE, OVERLAP)
    await store.aclose()
    retriever = build_retriever(config, None, embedder)
    assert retriever is not None
    assert "Free parking" in (await retriever.retrieve("is there parking", 1))[0]
    await retriever.aclose()
    config.supabase.table = "docs; drop table x"
    with pytest.raises(ValueError, match="plain SQL identifier"):
        build_store(config, None)


def documented_supabase_sql() -> str:
    doc = (REPO / "docs" / "agent-runtime.md").read_text()
    return "create extension" + doc.split("```sql\ncreate extension", 1)[1].split("```", 1)[0]


async def test_the_documented_match_documents_sql_runs_on_real_postgres_and_ranks_by_similarity(
        fresh_db: str, embedder: WordLlamaEmbedder) -> None:
    import psycopg
    from pgvector.psycopg import register_vector_async

    async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as conn:
        await conn.execute(documented_supabase_sql().encode())
        await register_vector_async(conn)
        texts = ["We open on Sunday from 11am to 3pm.", "Free parking is behind the building."]
        for index, (text, vector) in enumerate(zip(texts, await embedder.embed(texts), strict=True)):
            await conn.execute("insert into documents (source, chunk_index, content, content_hash, embedding) "
                               "values ('faq', %s, %s, '', %s)", (index, text, vector))
        (query,) = await embedder.embed(["when do you open on sunday"])
        cursor = await conn.execute("select content, similarity from match_documents(%s, 2)", (query,))
        rows = await cursor.fetchall()
    assert [r[0] for r in rows] == texts
    assert rows[0][1] > rows[1][1]
