"""The PostgreSQL provider (default): documents, their lines with embeddings, history and digests.

`list()` answers from an in-process cache filled by `prefetch()` at call set-up and by every write, so
the prompt path never touches the database. Writes are compare-and-set on the document's revision
inside a transaction holding a per-document advisory lock, so two writers can never both win.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from internal.db import Database
from internal.memory.provider import (
    ApplyResult,
    ChangeContext,
    Health,
    ListOptions,
    MemoryChange,
    MemoryDocument,
    ProviderCapabilities,
    ProviderDescription,
    QueryOptions,
    QueryResult,
    RevisionConflict,
    Scope,
)
from internal.memory.records import DocumentCache, OwnerSummary, SessionDigest
from internal.rag.embedding import Embedder

log = logging.getLogger(__name__)

HISTORY_LIMIT = 20  # revisions kept per document
MEMORY_TABLES = ("memories", "memory_items", "memory_history", "session_digests")


def document_lines(content: str) -> builtins.list[str]:
    """The retrievable items of a document: its non-empty lines, list markers removed."""
    lines = []
    for raw in content.splitlines():
        line = raw.strip().lstrip("-*").strip()
        if line and not line.startswith(("<!--", "#")):
            lines.append(line)
    return lines


def _epoch(value: datetime | None) -> float:
    return value.timestamp() if value is not None else 0.0


class PgvectorProvider:
    def __init__(self, database: Database, embedder: Embedder | None, retention_s: float) -> None:
        self._db = database
        self._embedder = embedder
        self._retention_s = retention_s
        self._cache = DocumentCache()

    def describe(self) -> ProviderDescription:
        return ProviderDescription(key="pgvector", label="PostgreSQL with pgvector",
                                   capabilities=ProviderCapabilities(semantic_query=self._embedder is not None))

    # ---- reads ---------------------------------------------------------------------------------

    def list(self, owner_id: str, options: ListOptions) -> Sequence[MemoryDocument]:
        return self._cache.get(owner_id, options)

    def cached(self, owner_id: str) -> bool:
        return self._cache.known(owner_id)

    async def prefetch(self, owner_id: str) -> None:
        documents = await self._read(owner_id)
        self._cache.put(owner_id, documents)

    async def load(self, owner_id: str) -> builtins.list[MemoryDocument]:
        return [document for document, _ in await self._read(owner_id)]

    def invalidate(self, owner_id: str) -> None:
        self._cache.forget(owner_id)

    async def _read(self, owner_id: str) -> builtins.list[tuple[MemoryDocument, float]]:
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT scope, content, revision, format, updated_at, expires_at FROM memories "
                "WHERE owner_key = %s AND expires_at > now()",
                (owner_id,),
            )
            rows = await cursor.fetchall()
        return [(MemoryDocument(row[0], row[1], int(row[2]), row[3], _epoch(row[4])), _epoch(row[5]))
                for row in rows]

    async def query(self, owner_id: str, query: str, options: QueryOptions, context: Any = None) -> QueryResult:
        if self._embedder is None or not query.strip():
            return QueryResult([])
        (vector,) = await self._embedder.embed([query])
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT text FROM memory_items WHERE owner_key = %s AND scope = ANY(%s) AND expires_at > now() "
                "ORDER BY embedding <=> %s LIMIT %s",
                (owner_id, list(options.scopes), vector, options.top_k),
            )
            memories = [row[0] for row in await cursor.fetchall()]
        return QueryResult(memories, "\n".join(f"- {m}" for m in memories))

    # ---- writes --------------------------------------------------------------------------------

    async def apply(self, owner_id: str, changes: Sequence[MemoryChange], context: ChangeContext) -> ApplyResult:
        retention_s = context.retention_s or self._retention_s
        items = {change.scope: document_lines(change.content) for change in changes}
        vectors: dict[Scope, builtins.list[Any]] = {}
        if self._embedder is not None:
            for scope, lines in items.items():
                vectors[scope] = await self._embed_lines(owner_id, scope, lines)
        written: builtins.list[tuple[MemoryDocument, float]] = []
        async with self._db.pool.connection() as conn, conn.transaction():
            for change in changes:
                written.append(await self._write(conn, owner_id, change, context, retention_s,
                                                 items[change.scope], vectors.get(change.scope)))
        self._cache.put(owner_id, written)
        return ApplyResult(len(written), [document for document, _ in written])

    async def _embed_lines(self, owner: str, scope: Scope, lines: builtins.list[str]) -> builtins.list[Any]:
        """Embeddings for a document's lines, reusing those of lines that did not change (an edit
        usually touches one line; re-embedding all of them made writes grow with the document)."""
        assert self._embedder is not None
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute("SELECT text, embedding FROM memory_items WHERE owner_key = %s AND scope = %s",
                                        (owner, scope))
            known = {row[0]: row[1] for row in await cursor.fetchall()}
        missing = [line for line in dict.fromkeys(lines) if line not in known]
        if missing:
            known.update(zip(missing, await self._embedder.embed(missing), strict=True))
        return [known[line] for line in lines]

    async def _write(self, conn: AsyncConnection[Any], owner: str, change: MemoryChange, context: ChangeContext,
                     retention_s: float, lines: builtins.list[str],
                     vectors: builtins.list[Any] | None) -> tuple[MemoryDocument, float]:
        # Row locks cannot serialise the first write of a document (there is no row yet), so writers of one
        # document queue on an advisory lock for the rest of this transaction, on every node.
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"{owner}:{change.scope}",))
        cursor = await conn.execute(
            "SELECT revision, expires_at > now() FROM memories WHERE owner_key = %s AND scope = %s",
            (owner, change.scope),
        )
        row = await cursor.fetchone()
        live = bool(row and row[1])
        current = int(row[0]) if live and row else 0
        if current != change.base_revision:
            raise RevisionConflict(change.scope, current)
        if row is not None and not live:
            # An expired record is gone as far as anyone can tell; do not let its history linger.
            await conn.execute("DELETE FROM memory_history WHERE owner_key = %s AND scope = %s", (owner, change.scope))
        revision = current + 1
        embedding = vectors[0] if vectors else None
        cursor = await conn.execute(
            "INSERT INTO memories (owner_key, scope, content, char_count, revision, embedding, expires_at, "
            "source_session) VALUES (%s, %s, %s, %s, %s, %s, now() + make_interval(secs => %s), %s) "
            "ON CONFLICT (owner_key, scope) DO UPDATE SET content = EXCLUDED.content, "
            "char_count = EXCLUDED.char_count, revision = EXCLUDED.revision, embedding = EXCLUDED.embedding, "
            "updated_at = now(), expires_at = EXCLUDED.expires_at, source_session = EXCLUDED.source_session "
            "RETURNING extract(epoch FROM updated_at), extract(epoch FROM expires_at)",
            (owner, change.scope, change.content, len(change.content), revision, embedding, retention_s,
             context.session_id),
        )
        stamps = await cursor.fetchone()
        assert stamps is not None
        await conn.execute(
            "INSERT INTO memory_history (owner_key, scope, revision, content, source, expires_at) "
            "VALUES (%s, %s, %s, %s, %s, now() + make_interval(secs => %s))",
            (owner, change.scope, revision, change.content, context.source, retention_s),
        )
        await conn.execute(
            "DELETE FROM memory_history WHERE owner_key = %s AND scope = %s AND revision <= %s",
            (owner, change.scope, revision - HISTORY_LIMIT),
        )
        # Every owner's history and items share the document's expiry: nothing outlives the record.
        await conn.execute("UPDATE memory_history SET expires_at = now() + make_interval(secs => %s) "
                           "WHERE owner_key = %s AND scope = %s", (retention_s, owner, change.scope))
        await conn.execute("DELETE FROM memory_items WHERE owner_key = %s AND scope = %s", (owner, change.scope))
        if vectors:
            async with conn.cursor() as items:
                await items.executemany(
                    "INSERT INTO memory_items (owner_key, scope, position, text, embedding, expires_at) "
                    "VALUES (%s, %s, %s, %s, %s, now() + make_interval(secs => %s))",
                    [(owner, change.scope, i, line, vector, retention_s)
                     for i, (line, vector) in enumerate(zip(lines, vectors, strict=True))],
                )
        document = MemoryDocument(change.scope, change.content, revision, "markdown", float(stamps[0]))
        return document, float(stamps[1])

    async def delete_owner(self, owner_id: str) -> dict[str, int]:
        removed: dict[str, int] = {}
        async with self._db.pool.connection() as conn, conn.transaction():
            for table in MEMORY_TABLES:
                cursor = await conn.execute(f"DELETE FROM {table} WHERE owner_key = %s", (owner_id,))
                removed[table] = cursor.rowcount
        self._cache.forget(owner_id)
        return removed

    async def purge_expired(self) -> dict[str, int]:
        removed: dict[str, int] = {}
        async with self._db.pool.connection() as conn, conn.transaction():
            for table in MEMORY_TABLES:
                cursor = await conn.execute(f"DELETE FROM {table} WHERE expires_at <= now()")
                removed[table] = cursor.rowcount
        return removed

    async def owners(self, limit: int = 100, offset: int = 0) -> builtins.list[OwnerSummary]:
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT owner_key, count(*), sum(char_count), max(updated_at), max(expires_at) FROM memories "
                "WHERE expires_at > now() GROUP BY owner_key ORDER BY owner_key LIMIT %s OFFSET %s",
                (limit, offset),
            )
            rows = await cursor.fetchall()
        return [OwnerSummary(r[0], int(r[1]), int(r[2] or 0), _epoch(r[3]), _epoch(r[4])) for r in rows]

    async def add_session_digest(self, owner_id: str, digest: SessionDigest, retention_s: float) -> None:
        async with self._db.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO session_digests (owner_key, session_id, topics, gist, expires_at) "
                "VALUES (%s, %s, %s, %s, now() + make_interval(secs => %s))",
                (owner_id, digest.session_id, digest.topics, digest.gist[:50], retention_s),
            )

    async def session_digests(self, owner_id: str, limit: int = 5) -> builtins.list[SessionDigest]:
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT session_id, topics, gist, extract(epoch FROM created_at) FROM session_digests "
                "WHERE owner_key = %s AND expires_at > now() ORDER BY created_at DESC LIMIT %s",
                (owner_id, limit),
            )
            rows = await cursor.fetchall()
        return [SessionDigest(r[0], list(r[1]), r[2], float(r[3])) for r in rows]

    def health(self) -> Health:
        return Health(True, "pgvector")

    async def close(self) -> None:
        return None
