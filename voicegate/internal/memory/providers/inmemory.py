"""The in-process provider: for tests and single-node deployments that accept losing memory on restart.

It keeps the same promises as the stores that outlive a process: an erasure epoch per owner raised by
`delete_owner()` (a write that began before an erasure is refused with OwnerErased), retention per
document, per history entry and per digest, history as metadata only (no removed text is kept), and an
export of everything held for an owner.
"""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from voicegate.internal.memory.provider import (
    ApplyResult,
    ChangeContext,
    ChangeSource,
    Health,
    ListOptions,
    MemoryChange,
    MemoryDocument,
    OwnerErased,
    ProviderDescription,
    RevisionConflict,
    Scope,
)
from voicegate.internal.memory.records import OwnerSummary, SessionDigest, forget_in_session_digest
from voicegate.internal.memory.tasks import TaskEntry

EXPORT_PROGRESS_EVERY = 500  # rows between two progress reports of an export


@dataclass(frozen=True, slots=True)
class _Record:
    document: MemoryDocument
    expires_at: float


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """That a document changed, never what it said: the text a change removed must not linger here."""

    scope: Scope
    revision: int
    source: ChangeSource
    session_id: str | None
    changed_at: float
    char_count: int
    expires_at: float  # its own: changed_at + the retention of that write, never refreshed by later ones


@dataclass(frozen=True, slots=True)
class _Digest:
    digest: SessionDigest
    expires_at: float


@dataclass(frozen=True, slots=True)
class _Task:
    entry: TaskEntry
    expires_at: float


@dataclass(frozen=True, slots=True)
class _Erasure:
    epoch: int
    erased_at: float


class InMemoryProvider:
    def __init__(self, retention_s: float, history_limit: int = 20, *, fence_s: float | None = None) -> None:
        self._retention_s = retention_s
        # How long an erasure's epoch is remembered: longer than any write begun before it can wait
        # (MemoryConfig.erasure_fence_s; at least the retention).
        self._fence_s = max(fence_s or 0.0, retention_s)
        self._history_limit = history_limit  # entries kept per document
        self._records: dict[tuple[str, Scope], _Record] = {}
        self._history: dict[tuple[str, Scope], builtins.list[HistoryEntry]] = {}
        self._digests: dict[str, builtins.list[_Digest]] = {}
        self._tasks: dict[str, dict[str, _Task]] = {}  # owner -> task id -> entry (the task ledger)
        self._erasures: dict[str, _Erasure] = {}
        self._fingerprint: str | None = None
        self._lock = asyncio.Lock()

    def describe(self) -> ProviderDescription:
        return ProviderDescription(key="memory", label="In-process memory")

    def _live(self, owner: str, scope: Scope) -> _Record | None:
        record = self._records.get((owner, scope))
        if record is None or record.expires_at <= time.time():
            return None
        return record

    def _epoch(self, owner: str) -> int:
        erasure = self._erasures.get(owner)
        return erasure.epoch if erasure else 0

    def _check_epoch(self, owner: str, expected: int | None) -> None:
        if expected is not None and (current := self._epoch(owner)) != expected:
            raise OwnerErased(current)

    # ---- reads -----------------------------------------------------------------------------------

    def list(self, owner_id: str, options: ListOptions) -> Sequence[MemoryDocument]:
        return [r.document for scope in options.scopes if (r := self._live(owner_id, scope)) is not None]

    async def prefetch(self, owner_id: str) -> None:
        return None

    async def load(self, owner_id: str) -> builtins.list[MemoryDocument]:
        return list(self.list(owner_id, ListOptions(max_chars=10**9)))

    async def erasure_epoch(self, owner_id: str) -> int:
        return self._epoch(owner_id)

    def history(self, owner_id: str, scope: Scope) -> builtins.list[HistoryEntry]:
        """The document's unexpired history, oldest first."""
        now = time.time()
        return [entry for entry in self._history.get((owner_id, scope), []) if entry.expires_at > now]

    # ---- writes ----------------------------------------------------------------------------------

    async def apply(self, owner_id: str, changes: Sequence[MemoryChange], context: ChangeContext) -> ApplyResult:
        async with self._lock:
            self._check_epoch(owner_id, context.erasure_epoch)
            for change in changes:
                live = self._live(owner_id, change.scope)
                current = live.document.revision if live else 0
                if current != change.base_revision:
                    raise RevisionConflict(change.scope, current)
            now = time.time()
            expires_at = now + (context.retention_s or self._retention_s)
            changed = []
            for change in changes:
                key = (owner_id, change.scope)
                revision = change.base_revision + 1
                document = MemoryDocument(change.scope, change.content, revision, change.format, now)
                self._records[key] = _Record(document, expires_at)
                entry = HistoryEntry(change.scope, revision, context.source, context.session_id, now,
                                     len(change.content), expires_at)
                self._history[key] = [*self._history.get(key, []), entry][-self._history_limit :]
                changed.append(document)
            return ApplyResult(len(changed), changed)

    async def add_session_digest(self, owner_id: str, digest: SessionDigest, retention_s: float, *,
                                 erasure_epoch: int | None = None, max_per_owner: int = 200,
                                 memory_revision: int | None = None) -> None:
        async with self._lock:
            self._check_epoch(owner_id, erasure_epoch)
            if memory_revision is not None:  # judged against this `memory`: refused once it moved on
                live = self._live(owner_id, "memory")
                current = live.document.revision if live is not None else 0
                if current != memory_revision:
                    raise RevisionConflict("memory", current)
            now = time.time()
            kept = replace(digest, topics=list(digest.topics), actions=[dict(a) for a in digest.actions])
            items = [*(d for d in self._digests.get(owner_id, []) if d.expires_at > now),
                     _Digest(kept, now + retention_s)]
            items.sort(key=lambda d: d.digest.created_at)  # stable: equal times keep their order
            self._digests[owner_id] = items[-max_per_owner:]

    async def session_digests(self, owner_id: str, limit: int = 5) -> builtins.list[SessionDigest]:
        now = time.time()
        live = [d.digest for d in self._digests.get(owner_id, []) if d.expires_at > now]
        return sorted(live, key=lambda d: d.created_at, reverse=True)[:limit]

    async def scrub_session_digests(self, owner_id: str, words: set[str]) -> int:
        """A fact was forgotten: every digest of the owner (expired ones too) loses what states it;
        returns how many changed or went."""
        async with self._lock:
            items = self._digests.get(owner_id, [])
            kept, changed = [], 0
            for item in items:
                scrubbed = forget_in_session_digest(item.digest, words)
                changed += scrubbed is not item.digest
                if scrubbed is not None:
                    kept.append(_Digest(scrubbed, item.expires_at))
            self._keep(self._digests, owner_id, kept)
            return changed

    # ---- the task ledger (internal/memory/tasks.py) ----------------------------------------------

    async def record_task(self, owner_id: str, entry: TaskEntry, *, erasure_epoch: int | None, retention_s: float,
                          terminal_keep_s: float, max_per_owner: int) -> None:
        async with self._lock:
            self._check_epoch(owner_id, erasure_epoch)
            now = time.time()
            tasks = {k: t for k, t in self._tasks.get(owner_id, {}).items() if t.expires_at > now}
            before = tasks.get(entry.task_id)
            created = before.entry.created_at if before is not None else now
            stored = replace(entry, created_at=created, updated_at=now,
                             session_id=before.entry.session_id if before is not None else entry.session_id)
            expires = now + terminal_keep_s if entry.terminal else (before.expires_at if before else now + retention_s)
            tasks[entry.task_id] = _Task(stored, expires)
            newest = sorted(tasks.values(), key=lambda t: t.entry.created_at)[-max_per_owner:]
            self._tasks[owner_id] = {t.entry.task_id: t for t in newest}

    async def tasks(self, owner_id: str, task_ids: builtins.list[str]) -> builtins.list[TaskEntry]:
        now = time.time()
        held = self._tasks.get(owner_id, {})
        return [held[t].entry for t in task_ids if t in held and held[t].expires_at > now]

    # ---- erasure and retention -------------------------------------------------------------------

    async def delete_owner(self, owner_id: str) -> dict[str, int]:
        async with self._lock:
            self._erasures[owner_id] = _Erasure(self._epoch(owner_id) + 1, time.time())
            removed = {"memories": 0, "memory_history": 0,
                       "session_digests": len(self._digests.pop(owner_id, [])),
                       "memory_tasks": len(self._tasks.pop(owner_id, {}))}
            for key in [k for k in self._records if k[0] == owner_id]:
                del self._records[key]
                removed["memories"] += 1
            for key in [k for k in self._history if k[0] == owner_id]:
                removed["memory_history"] += len(self._history.pop(key))
            return removed

    async def purge_expired(self) -> dict[str, int]:
        async with self._lock:
            now = time.time()
            removed = {"memories": 0, "memory_history": 0, "session_digests": 0, "memory_tasks": 0}
            for key in [k for k, r in self._records.items() if r.expires_at <= now]:
                del self._records[key]
                removed["memories"] += 1
            for key, entries in list(self._history.items()):
                kept = [e for e in entries if e.expires_at > now]
                removed["memory_history"] += len(entries) - len(kept)
                self._keep(self._history, key, kept)
            for owner, items in list(self._digests.items()):
                live = [d for d in items if d.expires_at > now]
                removed["session_digests"] += len(items) - len(live)
                self._keep(self._digests, owner, live)
            for owner, held in list(self._tasks.items()):
                alive = {k: t for k, t in held.items() if t.expires_at > now}
                removed["memory_tasks"] += len(held) - len(alive)
                if alive:
                    self._tasks[owner] = alive
                else:
                    del self._tasks[owner]
            # Past the fence no writer that started before an erasure is still alive.
            for owner in [o for o, e in self._erasures.items() if e.erased_at + self._fence_s <= now]:
                del self._erasures[owner]
            return removed

    @staticmethod
    def _keep(table: dict[Any, builtins.list[Any]], key: Any, rows: builtins.list[Any]) -> None:
        if rows:
            table[key] = rows
        else:
            table.pop(key, None)

    # ---- owner-wide questions --------------------------------------------------------------------

    async def export_owner(self, owner_id: str, progress: Callable[[str, int], None] | None = None
                           ) -> dict[str, builtins.list[dict[str, Any]]]:
        """Everything held of the owner, expired-but-not-yet-swept included."""
        memories = [{"scope": scope, "content": r.document.content, "revision": r.document.revision,
                     "format": r.document.format, "updated_at": r.document.updated_at, "expires_at": r.expires_at}
                    for (owner, scope), r in sorted(self._records.items()) if owner == owner_id]
        history = [asdict(entry) for (owner, _), entries in sorted(self._history.items()) if owner == owner_id
                   for entry in entries]
        digests = [{**asdict(d.digest), "expires_at": d.expires_at} for d in self._digests.get(owner_id, [])]
        erasure = self._erasures.get(owner_id)
        tasks = [{**asdict(t.entry), "expires_at": t.expires_at} for t in self._tasks.get(owner_id, {}).values()]
        tables = {"memories": memories, "memory_history": history, "session_digests": digests,
                  "memory_tasks": tasks, "memory_erasures": [asdict(erasure)] if erasure else []}
        if progress is not None:
            for table, rows in tables.items():
                for done in range(EXPORT_PROGRESS_EVERY, len(rows), EXPORT_PROGRESS_EVERY):
                    progress(table, done)
                progress(table, len(rows))
        return tables

    async def owners(self, limit: int = 100, offset: int = 0) -> builtins.list[OwnerSummary]:
        by_owner: dict[str, builtins.list[_Record]] = {}
        for (owner, _scope), record in self._records.items():
            if record.expires_at > time.time():
                by_owner.setdefault(owner, []).append(record)
        summaries = [
            OwnerSummary(owner, len(rs), sum(len(r.document.content) for r in rs),
                         max(r.document.updated_at or 0 for r in rs), max(r.expires_at for r in rs))
            for owner, rs in sorted(by_owner.items())
        ]
        return summaries[offset : offset + limit]

    async def stored_owner_count(self) -> int:
        """Owners with anything held (documents, history or digests, live or not yet swept)."""
        return len({owner for owner, _ in self._records} | {owner for owner, _ in self._history}
                   | set(self._digests) | set(self._tasks))

    async def key_fingerprint(self) -> str | None:
        return self._fingerprint

    async def set_key_fingerprint(self, fingerprint: str) -> None:
        self._fingerprint = fingerprint

    def health(self) -> Health:
        return Health(True)

    async def close(self) -> None:
        return None
