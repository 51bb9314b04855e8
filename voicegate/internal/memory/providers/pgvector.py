"""The PostgreSQL provider (default): documents, their lines with embeddings, history and digests.

`list()` answers from an in-process cache filled by `prefetch()` at call set-up and by every write, so
the prompt path never touches the database. Every write and every erasure of an owner runs in one
transaction holding that owner's advisory lock: writes are compare-and-set on the document's revision
and refused when the owner was erased since the writer started (its erasure epoch), so two writers can
never both win and nothing begun before an erasure can bring the caller back. Each transaction that
changes an owner also sends `pg_notify` on the change channel, delivered at commit to every process on
this database (servers, the CLI), whoever made the change.
"""

from __future__ import annotations

import builtins
import logging
import secrets
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from voicegate.internal.db import Database
from voicegate.internal.memory.provider import (
    ApplyResult,
    ChangeContext,
    Health,
    ListOptions,
    MemoryChange,
    MemoryDocument,
    OwnerErased,
    ProviderCapabilities,
    ProviderDescription,
    QueryOptions,
    QueryResult,
    RevisionConflict,
    Scope,
)
from voicegate.internal.memory.providers import pgvector_owners
from voicegate.internal.memory.records import DocumentCache, OwnerSummary, SessionDigest, forget_in_session_digest
from voicegate.internal.memory.tasks import TaskEntry
from voicegate.internal.rag.embedding import Embedder

log = logging.getLogger(__name__)

HISTORY_LIMIT = 20  # revisions kept per document
MEMORY_TABLES = ("memories", "memory_items", "memory_history", "session_digests", "memory_tasks")
CHANGE_CHANNEL = "voicegate_memory"  # payload: "<node id>:<owner key>:<changed|erased>", never content


def document_lines(content: str) -> builtins.list[str]:
    """The retrievable items of a document: its non-empty lines, list markers removed."""
    lines = []
    for raw in content.splitlines():
        line = raw.strip().lstrip("-*").strip()
        if line and not line.startswith(("<!--", "#")):
            lines.append(line)
    return lines


def _seconds(value: datetime | None) -> float:
    return value.timestamp() if value is not None else 0.0


async def lock_owner(conn: AsyncConnection[Any], owner: str) -> None:
    """Serialise every writer and eraser of one owner, on every node, until the transaction ends.
    (Row locks cannot: the first write of an owner has no row to lock yet.)"""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"memory-owner:{owner}",))


async def current_epoch(conn: AsyncConnection[Any], owner: str) -> int:
    cursor = await conn.execute("SELECT epoch FROM memory_erasures WHERE owner_key = %s", (owner,))
    row = await cursor.fetchone()
    return int(row[0]) if row else 0


async def check_epoch(conn: AsyncConnection[Any], owner: str, expected: int | None) -> None:
    """Refuse a write whose writer started before the owner's latest erasure (call with the lock held)."""
    if expected is None:
        return
    epoch = await current_epoch(conn, owner)
    if epoch != expected:
        raise OwnerErased(epoch)


class PgvectorProvider:
    notifies_changes = True  # in each write's own transaction (see `_announce`): no change bus announces for it

    def __init__(self, database: Database, embedder: Embedder | None, retention_s: float,
                 node_id: str | None = None, *, fence_s: float | None = None) -> None:
        self._db = database
        self._embedder = embedder
        self._retention_s = retention_s
        # How long an erasure's epoch is kept (MemoryConfig.erasure_fence_s; at least the retention).
        self._fence_s = max(fence_s or 0.0, retention_s)
        self._cache = DocumentCache()
        # Names this process in change notices, so a node can skip the ones it sent itself.
        self.node_id = node_id or secrets.token_hex(6)

    def describe(self) -> ProviderDescription:
        return ProviderDescription(key="pgvector", label="PostgreSQL with pgvector",
                                   capabilities=ProviderCapabilities(semantic_query=self._embedder is not None))

    # ---- reads ---------------------------------------------------------------------------------

    def list(self, owner_id: str, options: ListOptions) -> Sequence[MemoryDocument]:
        return self._cache.get(owner_id, options)

    def cached(self, owner_id: str) -> bool:
        return self._cache.known(owner_id)

    async def prefetch(self, owner_id: str) -> None:
        for _attempt in range(3):  # a read overtaken by an invalidation is stale: read again
            generation = self._cache.generation(owner_id)
            documents = await self._read(owner_id)
            if self._cache.replace(owner_id, documents, generation):
                return

    async def load(self, owner_id: str) -> builtins.list[MemoryDocument]:
        return [document for document, _ in await self._read(owner_id)]

    def invalidate(self, owner_id: str) -> None:
        self._cache.forget(owner_id)

    def invalidate_all(self) -> None:
        self._cache.clear()

    async def erasure_epoch(self, owner_id: str) -> int:
        async with self._db.pool.connection() as conn:
            return await current_epoch(conn, owner_id)

    async def _announce(self, conn: AsyncConnection[Any], owner: str, kind: str) -> None:
        await conn.execute("SELECT pg_notify(%s, %s)", (CHANGE_CHANNEL, f"{self.node_id}:{owner}:{kind}"))

    async def _read(self, owner_id: str) -> builtins.list[tuple[MemoryDocument, float]]:
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT scope, content, revision, format, updated_at, expires_at FROM memories "
                "WHERE owner_key = %s AND expires_at > now()",
                (owner_id,),
            )
            rows = await cursor.fetchall()
        return [(MemoryDocument(row[0], row[1], int(row[2]), row[3], _seconds(row[4])), _seconds(row[5]))
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
            await lock_owner(conn, owner_id)
            await check_epoch(conn, owner_id, context.erasure_epoch)
            for change in changes:
                written.append(await self._write(conn, owner_id, change, context, retention_s,
                                                 items[change.scope], vectors.get(change.scope)))
            await self._announce(conn, owner_id, "changed")
        self._cache.update(owner_id, written)
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
            "INSERT INTO memories (owner_key, scope, content, char_count, format, revision, embedding, expires_at, "
            "source_session) VALUES (%s, %s, %s, %s, %s, %s, %s, now() + make_interval(secs => %s), %s) "
            "ON CONFLICT (owner_key, scope) DO UPDATE SET content = EXCLUDED.content, "
            "char_count = EXCLUDED.char_count, format = EXCLUDED.format, revision = EXCLUDED.revision, "
            "embedding = EXCLUDED.embedding, updated_at = now(), expires_at = EXCLUDED.expires_at, "
            "source_session = EXCLUDED.source_session "
            "RETURNING extract(epoch FROM updated_at), extract(epoch FROM expires_at), format",
            (owner, change.scope, change.content, len(change.content), change.format, revision, embedding,
             retention_s, context.session_id),
        )
        stamps = await cursor.fetchone()
        assert stamps is not None
        # History says who wrote which revision when, never what: removed text must not survive here.
        # Each row expires by its own age; a later write does not prolong earlier ones.
        await conn.execute(
            "INSERT INTO memory_history (owner_key, scope, revision, source, char_count, session_id, expires_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, now() + make_interval(secs => %s)) "
            "ON CONFLICT (owner_key, scope, revision) DO NOTHING",
            (owner, change.scope, revision, context.source, len(change.content), context.session_id, retention_s),
        )
        await conn.execute(
            "DELETE FROM memory_history WHERE owner_key = %s AND scope = %s AND revision <= %s",
            (owner, change.scope, revision - HISTORY_LIMIT),
        )
        await conn.execute("DELETE FROM memory_items WHERE owner_key = %s AND scope = %s", (owner, change.scope))
        if vectors:
            async with conn.cursor() as items:
                await items.executemany(
                    "INSERT INTO memory_items (owner_key, scope, position, text, embedding, expires_at) "
                    "VALUES (%s, %s, %s, %s, %s, now() + make_interval(secs => %s))",
                    [(owner, change.scope, i, line, vector, retention_s)
                     for i, (line, vector) in enumerate(zip(lines, vectors, strict=True))],
                )
        document = MemoryDocument(change.scope, change.content, revision, stamps[2], float(stamps[0]))
        return document, float(stamps[1])

    async def delete_owner(self, owner_id: str) -> dict[str, int]:
        """Every row of the owner, gone in one transaction that also raises its erasure epoch."""
        removed: dict[str, int] = {}
        async with self._db.pool.connection() as conn, conn.transaction():
            await lock_owner(conn, owner_id)
            for table in MEMORY_TABLES:
                cursor = await conn.execute(f"DELETE FROM {table} WHERE owner_key = %s", (owner_id,))
                removed[table] = cursor.rowcount
            await conn.execute(
                "INSERT INTO memory_erasures (owner_key, epoch, expires_at) "
                "VALUES (%s, 1, now() + make_interval(secs => %s)) ON CONFLICT (owner_key) DO UPDATE SET "
                "epoch = memory_erasures.epoch + 1, erased_at = now(), expires_at = EXCLUDED.expires_at",
                (owner_id, self._fence_s),
            )
            await self._announce(conn, owner_id, "erased")
        self._cache.forget(owner_id)
        return removed

    async def purge_expired(self) -> dict[str, int]:
        removed: dict[str, int] = {}
        async with self._db.pool.connection() as conn, conn.transaction():
            for table in (*MEMORY_TABLES, "memory_erasures"):
                cursor = await conn.execute(f"DELETE FROM {table} WHERE expires_at <= now()")
                removed[table] = cursor.rowcount
        return removed

    async def owners(self, limit: int = 100, offset: int = 0) -> builtins.list[OwnerSummary]:
        return await pgvector_owners.owners(self._db, limit, offset)

    async def add_session_digest(self, owner_id: str, digest: SessionDigest, retention_s: float, *,
                                 erasure_epoch: int | None = None, max_per_owner: int = 200,
                                 memory_revision: int | None = None) -> None:
        async with self._db.pool.connection() as conn, conn.transaction():
            await lock_owner(conn, owner_id)
            await check_epoch(conn, owner_id, erasure_epoch)
            if memory_revision is not None:  # judged against this `memory`: refused once it moved on
                cursor = await conn.execute("SELECT revision FROM memories WHERE owner_key = %s AND scope = 'memory' "
                                            "AND expires_at > now()", (owner_id,))
                row = await cursor.fetchone()
                current = int(row[0]) if row else 0
                if current != memory_revision:
                    raise RevisionConflict("memory", current)
            await conn.execute(
                "INSERT INTO session_digests (owner_key, session_id, topics, gist, actions, expires_at) "
                "VALUES (%s, %s, %s, %s, %s, now() + make_interval(secs => %s))",
                (owner_id, digest.session_id, digest.topics, digest.gist[:50], Jsonb(digest.actions), retention_s),
            )
            await conn.execute(
                "DELETE FROM session_digests WHERE owner_key = %s AND id NOT IN (SELECT id FROM session_digests "
                "WHERE owner_key = %s ORDER BY created_at DESC, id DESC LIMIT %s)",
                (owner_id, owner_id, max_per_owner),
            )

    async def session_digests(self, owner_id: str, limit: int = 5) -> builtins.list[SessionDigest]:
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT session_id, topics, gist, extract(epoch FROM created_at), actions FROM session_digests "
                "WHERE owner_key = %s AND expires_at > now() ORDER BY created_at DESC, id DESC LIMIT %s",
                (owner_id, limit),
            )
            rows = await cursor.fetchall()
        return [SessionDigest(r[0], list(r[1]), r[2], float(r[3]), list(r[4])) for r in rows]

    async def scrub_session_digests(self, owner_id: str, words: set[str]) -> int:
        """A fact was forgotten: every digest row of the owner (expired ones too) loses what states it, in
        one transaction under the owner's lock; returns how many rows changed or went."""
        changed = 0
        async with self._db.pool.connection() as conn, conn.transaction():
            await lock_owner(conn, owner_id)
            cursor = await conn.execute(
                "SELECT id, session_id, topics, gist, actions FROM session_digests WHERE owner_key = %s", (owner_id,))
            for row_id, session_id, topics, gist, actions in await cursor.fetchall():
                digest = SessionDigest(session_id, list(topics), gist, 0.0, list(actions))
                scrubbed = forget_in_session_digest(digest, words)
                if scrubbed is None:
                    await conn.execute("DELETE FROM session_digests WHERE id = %s", (row_id,))
                elif scrubbed is not digest:
                    await conn.execute("UPDATE session_digests SET topics = %s, gist = %s WHERE id = %s",
                                       (scrubbed.topics, scrubbed.gist, row_id))
                changed += scrubbed is not digest
        return changed

    # ---- the task ledger (internal/memory/tasks.py) ----------------------------------------------

    async def record_task(self, owner_id: str, entry: TaskEntry, *, erasure_epoch: int | None, retention_s: float,
                          terminal_keep_s: float, max_per_owner: int) -> None:
        """Create or move a task's entry under the owner's lock; a finished one is kept `terminal_keep_s`
        from now, an open one keeps its expiry; the oldest beyond `max_per_owner` go."""
        keep_s = terminal_keep_s if entry.terminal else retention_s
        async with self._db.pool.connection() as conn, conn.transaction():
            await lock_owner(conn, owner_id)
            await check_epoch(conn, owner_id, erasure_epoch)
            await conn.execute(
                "INSERT INTO memory_tasks (owner_key, task_id, session_id, kind, name, status, expires_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, now() + make_interval(secs => %s)) "
                "ON CONFLICT (owner_key, task_id) DO UPDATE SET status = EXCLUDED.status, updated_at = now(), "
                "expires_at = CASE WHEN %s THEN EXCLUDED.expires_at ELSE memory_tasks.expires_at END",
                (owner_id, entry.task_id, entry.session_id or None, entry.kind, entry.name, entry.status, keep_s,
                 entry.terminal),
            )
            await conn.execute(
                "DELETE FROM memory_tasks WHERE owner_key = %s AND task_id NOT IN (SELECT task_id FROM memory_tasks "
                "WHERE owner_key = %s ORDER BY created_at DESC, task_id DESC LIMIT %s)",
                (owner_id, owner_id, max_per_owner),
            )

    async def tasks(self, owner_id: str, task_ids: builtins.list[str]) -> builtins.list[TaskEntry]:
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT task_id, kind, name, status, coalesce(session_id, ''), extract(epoch FROM created_at), "
                "extract(epoch FROM updated_at) FROM memory_tasks "
                "WHERE owner_key = %s AND task_id = ANY(%s) AND expires_at > now()",
                (owner_id, task_ids),
            )
            rows = await cursor.fetchall()
        return [TaskEntry(r[0], r[1], r[2], r[3], r[4], float(r[5]), float(r[6])) for r in rows]

    async def export_owner(self, owner_id: str, progress: Callable[[str, int], None] | None = None,
                           ) -> dict[str, builtins.list[dict[str, Any]]]:
        return await pgvector_owners.export_owner(self._db, owner_id, progress)

    async def key_fingerprint(self) -> str | None:
        return await pgvector_owners.key_fingerprint(self._db)

    async def set_key_fingerprint(self, fingerprint: str) -> None:
        await pgvector_owners.set_key_fingerprint(self._db, fingerprint)

    async def stored_owner_count(self) -> int:
        return await pgvector_owners.stored_owner_count(self._db)

    def health(self) -> Health:
        return Health(True, "pgvector")

    async def close(self) -> None:
        """Release what this provider owns: its embedder (setup.build_provider makes one for it; an HTTP
        embedder holds a connection pool). The database is the gateway's, shared, and closed by it."""
        aclose = getattr(self._embedder, "aclose", None)
        if aclose is not None:
            await aclose()
