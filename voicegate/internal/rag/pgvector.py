"""Knowledge in PostgreSQL with pgvector: the retriever the pipeline asks, the store ingestion writes.

Both work on the configured `[pgvector] table` (default `rag_documents`, created by migration 0003)
through the gateway's connection pool. Similarity is cosine: the HNSW index orders by distance
(`<=>`), and similarity = 1 - distance is what `[rag] min_score` is compared with.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from voicegate.internal.db import Database
from voicegate.internal.rag.chunking import Chunk
from voicegate.internal.rag.embedding import Embedder
from voicegate.internal.rag.ingest import (
    EmbedFn,
    KnowledgeStoreError,
    SourceSummary,
    StoredChunk,
    SyncResult,
    chunk_key,
    embed_missing,
    plan_sync,
)

log = logging.getLogger(__name__)

# pgvector's default hnsw.ef_search: an HNSW scan returns at most this many rows, so a larger top-k
# raises it for that one query.
HNSW_DEFAULT_EF_SEARCH = 40


class PgvectorRetriever:
    def __init__(self, database: Database, embedder: Embedder, table: str = "rag_documents",
                 min_score: float = 0.0) -> None:
        self._db = database
        self._embedder = embedder
        self._min_score = min_score
        self._table = table
        self._query = sql.SQL(
            "SELECT content, 1 - (embedding <=> %(q)s) AS similarity FROM {} ORDER BY embedding <=> %(q)s LIMIT %(k)s"
        ).format(sql.Identifier(table))

    async def retrieve(self, text: str, top_k: int) -> list[str]:
        query = text.strip()
        if not query or top_k < 1:
            return []
        try:
            (vector,) = await self._embedder.embed([query])
            async with self._db.pool.connection() as conn:
                if top_k <= HNSW_DEFAULT_EF_SEARCH:
                    cursor = await conn.execute(self._query, {"q": vector, "k": top_k})
                    rows = await cursor.fetchall()
                else:
                    async with conn.transaction():  # SET LOCAL: the pooled connection keeps its default
                        await conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(top_k)))
                        cursor = await conn.execute(self._query, {"q": vector, "k": top_k})
                        rows = await cursor.fetchall()
        except Exception as exc:  # logged, never raised: a retrieval failure must not fail a turn
            log.warning("knowledge retrieval from %s failed: %s", self._table, describe(exc, self._table))
            return []
        # min_score 0 (the default) keeps every hit, even the (rare) negative similarities.
        return [content for content, similarity in rows if not self._min_score or similarity >= self._min_score]

    async def aclose(self) -> None:
        """The pool belongs to the gateway's Database, which closes it."""


class PgvectorStore:
    def __init__(self, database: Database, table: str = "rag_documents") -> None:
        self._db = database
        self._table = table
        self._ident = sql.Identifier(table)

    async def sync(self, source: str, chunks: Sequence[Chunk], embed: EmbedFn) -> SyncResult:
        # One transaction: readers see the source's old chunks or its new ones, never a mix or none.
        # The advisory lock serialises two ingests of the same source (they would both delete, then
        # both insert, and the second would hit the unique constraint).
        try:
            async with self._db.pool.connection() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                                   (f"rag:{self._table}:{source}",))
                cursor = await conn.execute(
                    sql.SQL("SELECT chunk_index, content_hash, coalesce(metadata->>'embedder', ''), embedding "
                            "FROM {} WHERE source = %s").format(self._ident),
                    (source,),
                )
                stored = [(StoredChunk(index, digest, embedder), vector)
                          for index, digest, embedder, vector in await cursor.fetchall()]
                plan = plan_sync([item for item, _ in stored], chunks)
                if not plan.identical:
                    vectors = await embed_missing(plan, {item.key: vector for item, vector in stored}, embed)
                    await conn.execute(sql.SQL("DELETE FROM {} WHERE source = %s").format(self._ident), (source,))
                    async with conn.cursor() as insert:
                        await insert.executemany(
                            sql.SQL(
                                "INSERT INTO {} (source, chunk_index, content, content_hash, embedding, metadata) "
                                "VALUES (%s, %s, %s, %s, %s, %s)"
                            ).format(self._ident),
                            [(source, c.index, c.content, c.content_hash, vectors[chunk_key(c)], Jsonb(c.metadata))
                             for c in chunks],
                        )
        except psycopg.Error as exc:
            raise KnowledgeStoreError(describe(exc, self._table)) from None
        if plan.identical:
            return SyncResult(source, 0, len(chunks), 0)
        return SyncResult(source, plan.added, plan.unchanged, plan.removed)

    async def sources(self) -> list[SourceSummary]:
        try:
            async with self._db.pool.connection() as conn:
                cursor = await conn.execute(
                    sql.SQL("SELECT source, count(*), max(created_at), "
                            "coalesce(string_agg(DISTINCT metadata->>'embedder', ', '), '') "
                            "FROM {} GROUP BY source ORDER BY source").format(self._ident)
                )
                rows = await cursor.fetchall()
        except psycopg.Error as exc:
            raise KnowledgeStoreError(describe(exc, self._table)) from None
        return [SourceSummary(source, int(count), at, embedders) for source, count, at, embedders in rows]

    async def delete(self, source: str) -> int:
        try:
            async with self._db.pool.connection() as conn:
                cursor = await conn.execute(sql.SQL("DELETE FROM {} WHERE source = %s").format(self._ident), (source,))
                return max(cursor.rowcount, 0)
        except psycopg.Error as exc:
            raise KnowledgeStoreError(describe(exc, self._table)) from None

    async def aclose(self) -> None:
        """The pool belongs to the Database, which its opener closes."""


def describe(exc: BaseException, table: str) -> str:
    """A message an operator can act on; the cases that need a setup step say which."""
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return (f"the table {table!r} does not exist; migrations create rag_documents, and a custom "
                f"[pgvector] table must be created with the DDL in docs/agent-runtime.md")
    if isinstance(exc, psycopg.errors.DataException) and "dimensions" in str(exc):
        return f"the embedding column of {table!r} does not take 256-dimension vectors: {str(exc).strip()}"
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
