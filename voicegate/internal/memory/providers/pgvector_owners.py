"""Owner-wide questions the PostgreSQL provider answers: listing, subject-access export, and the
owner-key fingerprint that proves a process holds the secret the stored keys were made with."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from voicegate.internal.db import Database
from voicegate.internal.memory.records import OwnerSummary

FINGERPRINT_KEY = "owner_key_fingerprint"
EXPORT_BATCH = 500  # rows fetched per round trip, and how often progress is reported
# Every table that holds something of an owner, and the columns an export shows (all of them).
EXPORT_TABLES: dict[str, str] = {
    "memories": "scope, content, char_count, format, revision, embedding, created_at, updated_at, expires_at, "
                "source_session",
    "memory_items": "scope, position, text, embedding, expires_at",
    "memory_history": "scope, revision, source, char_count, session_id, changed_at, expires_at",
    "session_digests": "id, session_id, topics, gist, actions, created_at, expires_at",
    "memory_tasks": "task_id, session_id, kind, name, status, created_at, updated_at, expires_at",
    "memory_erasures": "epoch, erased_at, expires_at",
}
ORDER = {"memories": "scope", "memory_items": "scope, position", "memory_history": "scope, revision",
         "session_digests": "created_at, id", "memory_tasks": "created_at, task_id", "memory_erasures": "epoch"}


def _seconds(value: datetime | None) -> float:
    return value.timestamp() if value is not None else 0.0


def _plain(value: Any) -> Any:
    """A JSON-ready form of a column value (timestamps as ISO 8601, vectors as lists of floats)."""
    if isinstance(value, datetime):
        return value.isoformat()
    for to_list in ("to_list", "tolist"):  # pgvector's Vector, or a numpy array
        if hasattr(value, to_list):
            return [float(x) for x in getattr(value, to_list)()]
    return value


async def owners(database: Database, limit: int, offset: int) -> list[OwnerSummary]:
    async with database.pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT owner_key, count(*), sum(char_count), max(updated_at), max(expires_at) FROM memories "
            "WHERE expires_at > now() GROUP BY owner_key ORDER BY owner_key LIMIT %s OFFSET %s",
            (limit, offset),
        )
        rows = await cursor.fetchall()
    return [OwnerSummary(r[0], int(r[1]), int(r[2] or 0), _seconds(r[3]), _seconds(r[4])) for r in rows]


async def export_owner(database: Database, owner: str,
                       progress: Callable[[str, int], None] | None) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table that holds something of `owner`, expired-but-not-yet-swept included,
    read in one snapshot (REPEATABLE READ) so the tables agree with each other."""
    out: dict[str, list[dict[str, Any]]] = {}
    async with database.pool.connection() as conn:
        await conn.set_autocommit(False)
        try:
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            for table, columns in EXPORT_TABLES.items():
                names = [c.strip() for c in columns.split(",")]
                rows: list[dict[str, Any]] = []
                async with conn.cursor(name=f"export_{table}") as cursor:
                    await cursor.execute(f"SELECT {columns} FROM {table} WHERE owner_key = %s "
                                         f"ORDER BY {ORDER[table]}", (owner,))
                    while batch := await cursor.fetchmany(EXPORT_BATCH):
                        rows.extend({name: _plain(value) for name, value in zip(names, row, strict=True)}
                                    for row in batch)
                        if progress is not None:
                            progress(table, len(rows))
                out[table] = rows
        finally:
            await conn.rollback()
            await conn.set_autocommit(True)
    return out


async def key_fingerprint(database: Database) -> str | None:
    async with database.pool.connection() as conn:
        cursor = await conn.execute("SELECT value FROM memory_settings WHERE key = %s", (FINGERPRINT_KEY,))
        row = await cursor.fetchone()
    return str(row[0]) if row else None


async def set_key_fingerprint(database: Database, fingerprint: str) -> None:
    async with database.pool.connection() as conn:
        await conn.execute(
            "INSERT INTO memory_settings (key, value) VALUES (%s, %s) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()",
            (FINGERPRINT_KEY, fingerprint),
        )


async def stored_owner_count(database: Database) -> int:
    """Owners with anything stored, live or expired but not yet swept (an HMAC key made with another
    secret can never be reached again, whatever its age)."""
    async with database.pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM (SELECT owner_key FROM memories UNION SELECT owner_key FROM session_digests "
            "UNION SELECT owner_key FROM memory_items UNION SELECT owner_key FROM memory_tasks) AS stored")
        row = await cursor.fetchone()
    return int(row[0]) if row else 0
