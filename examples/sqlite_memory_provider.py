"""An external MemoryProvider (protocol v2) kept in one SQLite file: a template for your own adapter.

Run voicegate with it:

    .venv/bin/python examples/sqlite_memory_provider.py --config config.toml

It shows everything an adapter owns: a small synchronous cache behind `list()` (filled by `prefetch()`),
compare-and-set writes that raise RevisionConflict, a naive semantic query (word overlap), retention, and
deletion. Replace the SQLite calls with your service's API; keep the shape.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from voicegate.memory import (
    MEMORY_PROVIDER_PROTOCOL_VERSION,
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
)


class SqliteMemoryProvider:
    def __init__(self, path: Path, retention_s: float = 90 * 86400) -> None:
        self._db = sqlite3.connect(path, check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS documents (owner TEXT, scope TEXT, content TEXT, revision INT, "
                         "updated REAL, expires REAL, PRIMARY KEY (owner, scope))")
        self._retention_s = retention_s
        self._cache: dict[str, list[MemoryDocument]] = {}
        self._lock = asyncio.Lock()

    def describe(self) -> ProviderDescription:
        return ProviderDescription(key="sqlite-example", label="SQLite (example)",
                                   protocol_version=MEMORY_PROVIDER_PROTOCOL_VERSION,
                                   capabilities=ProviderCapabilities(semantic_query=True))

    def _read(self, owner: str) -> list[MemoryDocument]:
        rows = self._db.execute("SELECT scope, content, revision, updated FROM documents "
                                "WHERE owner = ? AND expires > ?", (owner, time.time())).fetchall()
        return [MemoryDocument(row[0], row[1], row[2], "markdown", row[3]) for row in rows]

    def list(self, owner_id: str, options: ListOptions) -> Sequence[MemoryDocument]:
        return [d for d in self._cache.get(owner_id, []) if d.scope in options.scopes]

    async def prefetch(self, owner_id: str) -> None:
        self._cache[owner_id] = await asyncio.to_thread(self._read, owner_id)

    async def apply(self, owner_id: str, changes: Sequence[MemoryChange], context: ChangeContext) -> ApplyResult:
        async with self._lock:
            current = {d.scope: d.revision for d in await asyncio.to_thread(self._read, owner_id)}
            for change in changes:
                if current.get(change.scope, 0) != change.base_revision:
                    raise RevisionConflict(change.scope, current.get(change.scope, 0))
            now = time.time()
            for change in changes:
                self._db.execute("INSERT OR REPLACE INTO documents VALUES (?, ?, ?, ?, ?, ?)",
                                 (owner_id, change.scope, change.content, change.base_revision + 1, now,
                                  now + (context.retention_s or self._retention_s)))
            self._db.commit()
            documents = await asyncio.to_thread(self._read, owner_id)
            self._cache[owner_id] = documents
            return ApplyResult(len(changes), documents)

    async def query(self, owner_id: str, query: str, options: QueryOptions, context: object) -> QueryResult:
        wanted = set(query.lower().split())
        lines = [line.strip("- ").strip() for d in self._read(owner_id) if d.scope in options.scopes
                 for line in d.content.splitlines() if line.strip()]
        ranked = sorted(lines, key=lambda line: -len(wanted & set(line.lower().split())))[: options.top_k]
        return QueryResult(ranked, "\n".join(f"- {line}" for line in ranked))

    async def delete_owner(self, owner_id: str) -> dict[str, int]:
        removed = self._db.execute("DELETE FROM documents WHERE owner = ?", (owner_id,)).rowcount
        self._db.commit()
        self._cache.pop(owner_id, None)
        return {"documents": removed}

    async def purge_expired(self) -> dict[str, int]:
        removed = self._db.execute("DELETE FROM documents WHERE expires <= ?", (time.time(),)).rowcount
        self._db.commit()
        return {"documents": removed}

    def health(self) -> Health:
        return Health(True, "sqlite")

    async def close(self) -> None:
        self._db.close()


def main() -> None:
    import uvicorn

    from voicegate.internal.config import config_path_from, load_config
    from voicegate.server import create_gateway_application

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config")
    parser.add_argument("--db", default="memory-example.sqlite3")
    args = parser.parse_args()
    config = load_config(config_path_from(args.config))
    config.memory.enabled = True
    app = create_gateway_application(config, memory_provider=SqliteMemoryProvider(Path(args.db)))
    uvicorn.run(app, host=config.server.host, port=config.server.port)


if __name__ == "__main__":
    main()
