"""The in-process provider: for tests and single-node deployments that accept losing memory on restart."""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from internal.memory.provider import (
    ApplyResult,
    ChangeContext,
    Health,
    ListOptions,
    MemoryChange,
    MemoryDocument,
    ProviderDescription,
    RevisionConflict,
    Scope,
)
from internal.memory.records import OwnerSummary, SessionDigest


@dataclass(slots=True)
class _Record:
    document: MemoryDocument
    expires_at: float
    history: builtins.list[tuple[int, str]] = field(default_factory=list)


class InMemoryProvider:
    def __init__(self, retention_s: float, history_limit: int = 20) -> None:
        self._retention_s = retention_s
        self._history_limit = history_limit
        self._records: dict[tuple[str, Scope], _Record] = {}
        self._digests: dict[str, list[tuple[SessionDigest, float]]] = {}
        self._lock = asyncio.Lock()

    def describe(self) -> ProviderDescription:
        return ProviderDescription(key="memory", label="In-process memory")

    def _live(self, owner: str, scope: Scope) -> _Record | None:
        record = self._records.get((owner, scope))
        if record is None or record.expires_at <= time.time():
            return None
        return record

    def list(self, owner_id: str, options: ListOptions) -> Sequence[MemoryDocument]:
        return [r.document for scope in options.scopes if (r := self._live(owner_id, scope)) is not None]

    async def prefetch(self, owner_id: str) -> None:
        return None

    async def load(self, owner_id: str) -> builtins.list[MemoryDocument]:
        return list(self.list(owner_id, ListOptions(max_chars=10**9)))

    async def apply(self, owner_id: str, changes: Sequence[MemoryChange], context: ChangeContext) -> ApplyResult:
        async with self._lock:
            for change in changes:
                live = self._live(owner_id, change.scope)
                current = live.document.revision if live else 0
                if current != change.base_revision:
                    raise RevisionConflict(change.scope, current)
            now = time.time()
            retention = context.retention_s or self._retention_s
            changed = []
            for change in changes:
                live = self._live(owner_id, change.scope)
                revision = (live.document.revision if live else 0) + 1
                document = MemoryDocument(change.scope, change.content, revision, "markdown", now)
                history = live.history if live else []
                history = [*history, (revision, change.content)][-self._history_limit :]
                self._records[(owner_id, change.scope)] = _Record(document, now + retention, history)
                changed.append(document)
            return ApplyResult(len(changed), changed)

    async def delete_owner(self, owner_id: str) -> dict[str, int]:
        removed = {"memories": 0, "memory_history": 0, "session_digests": len(self._digests.pop(owner_id, []))}
        for key in [k for k in self._records if k[0] == owner_id]:
            record = self._records.pop(key)
            removed["memories"] += 1
            removed["memory_history"] += len(record.history)
        return removed

    async def purge_expired(self) -> dict[str, int]:
        now = time.time()
        expired = [k for k, r in self._records.items() if r.expires_at <= now]
        for key in expired:
            del self._records[key]
        digests = 0
        for owner, items in list(self._digests.items()):
            kept = [(d, e) for d, e in items if e > now]
            digests += len(items) - len(kept)
            self._digests[owner] = kept
        return {"memories": len(expired), "session_digests": digests}

    async def owners(self, limit: int = 100, offset: int = 0) -> builtins.list[OwnerSummary]:
        by_owner: dict[str, list[_Record]] = {}
        for (owner, _scope), record in self._records.items():
            if record.expires_at > time.time():
                by_owner.setdefault(owner, []).append(record)
        summaries = [
            OwnerSummary(owner, len(rs), sum(len(r.document.content) for r in rs),
                         max(r.document.updated_at or 0 for r in rs), max(r.expires_at for r in rs))
            for owner, rs in sorted(by_owner.items())
        ]
        return summaries[offset : offset + limit]

    async def add_session_digest(self, owner_id: str, digest: SessionDigest, retention_s: float) -> None:
        self._digests.setdefault(owner_id, []).append((digest, time.time() + retention_s))

    async def session_digests(self, owner_id: str, limit: int = 5) -> builtins.list[SessionDigest]:
        now = time.time()
        live = [d for d, expires in self._digests.get(owner_id, []) if expires > now]
        return sorted(live, key=lambda d: d.created_at, reverse=True)[:limit]

    def health(self) -> Health:
        return Health(True)

    async def close(self) -> None:
        return None
