"""The Markdown provider: USER.md and MEMORY.md per owner in a directory, written atomically.

Handy when an operator wants to read or hand-edit what is remembered. Each owner has a folder named by
its owner key (never a phone number) holding USER.md, MEMORY.md, state.json (revisions and expiry) and
digests.json (session digests). A write goes to a temporary file that is fsynced and renamed over the old
one, so a crash mid-write leaves the previous version, never half a document.

Several processes may share the directory (nodes on one volume, the CLI beside a server), so every
read-modify-write holds an exclusive `flock` on `<root>/.lock` and every multi-file read a shared one; the
asyncio lock only queues this process's writers. Erasure epochs live in `<root>/.erasures.json` (owner key
-> epoch and time of the last erasure: an HMAC and two numbers, no caller content) and are raised in the
critical section that removes the owner's folder, so a write that began before an erasure is refused
(OwnerErased) instead of bringing the owner back.
"""

from __future__ import annotations

import asyncio
import builtins
import fcntl
import json
import re
import shutil
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from voicegate.internal.memory.durable import write_atomically
from voicegate.internal.memory.provider import (
    ApplyResult,
    ChangeContext,
    Health,
    ListOptions,
    MemoryChange,
    MemoryDocument,
    OwnerErased,
    ProviderDescription,
    RevisionConflict,
    Scope,
)
from voicegate.internal.memory.records import DocumentCache, OwnerSummary, SessionDigest, forget_in_session_digest

FILES: dict[Scope, str] = {"user": "USER.md", "memory": "MEMORY.md"}
STATE = "state.json"
DIGESTS = "digests.json"
LOCK = ".lock"
ERASURES = ".erasures.json"
FINGERPRINT = ".owner-key-fingerprint"
EXPORT_PROGRESS_EVERY = 500  # rows between two progress reports of an export
_OWNER = re.compile(r"^[0-9a-f]{16,128}$")

Progress = Callable[[str, int], None]
Snapshot = builtins.list[tuple[MemoryDocument, float]]  # (document, expires_at), live documents only
_T = TypeVar("_T")


def _read_json(path: Path, default: _T) -> _T:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return default
    return value if isinstance(value, type(default)) else default


def _write_or_remove(path: Path, value: dict[str, Any] | builtins.list[Any]) -> None:
    """Write `value`, or remove the file when nothing is left in it (an empty file is no record)."""
    if value:
        write_atomically(path, json.dumps(value))
    else:
        path.unlink(missing_ok=True)


def _digest(item: dict[str, Any]) -> SessionDigest:
    """A digests.json entry as a SessionDigest (an entry written before `actions` existed has none)."""
    topics = item.get("topics")
    actions = item.get("actions")
    return SessionDigest(str(item.get("session_id", "")), [str(t) for t in topics] if isinstance(topics, list) else [],
                         str(item.get("gist") or ""), float(item.get("created_at") or 0.0),
                         [a for a in actions if isinstance(a, dict)] if isinstance(actions, list) else [])


def report_progress(tables: dict[str, builtins.list[dict[str, Any]]], progress: Progress | None) -> None:
    """`progress(table, rows so far)` every EXPORT_PROGRESS_EVERY rows and once at the end of each table."""
    if progress is None:
        return
    for table, rows in tables.items():
        for done in range(EXPORT_PROGRESS_EVERY, len(rows), EXPORT_PROGRESS_EVERY):
            progress(table, done)
        progress(table, len(rows))


class MarkdownProvider:
    def __init__(self, directory: Path, retention_s: float, *, fence_s: float | None = None) -> None:
        self._root = directory
        self._retention_s = retention_s
        # How long an erasure's epoch is remembered (MemoryConfig.erasure_fence_s; at least the retention).
        self._fence_s = max(fence_s or 0.0, retention_s)
        self._cache = DocumentCache()
        self._lock = asyncio.Lock()

    def describe(self) -> ProviderDescription:
        return ProviderDescription(key="markdown", label="Markdown files (USER.md, MEMORY.md)")

    # ---- the directory lock ----------------------------------------------------------------------

    def _locked(self, mode: int, work: Callable[[], _T]) -> _T:
        self._root.mkdir(parents=True, exist_ok=True)
        with open(self._root / LOCK, "a+b") as handle:  # closing it releases the lock
            fcntl.flock(handle, mode)
            return work()

    async def _exclusive(self, work: Callable[[], _T]) -> _T:
        """Run a read-modify-write in a thread, alone among every process using this directory."""
        async with self._lock:
            return await asyncio.to_thread(self._locked, fcntl.LOCK_EX, work)

    async def _shared(self, work: Callable[[], _T]) -> _T:
        """Run a read in a thread while no writer is half-way (so USER.md agrees with state.json)."""
        return await asyncio.to_thread(self._locked, fcntl.LOCK_SH, work)

    # ---- files (call these with the lock held) ---------------------------------------------------

    def _folder(self, owner: str) -> Path:
        if not _OWNER.match(owner):
            raise ValueError("owner keys are hexadecimal")
        return self._root / owner

    def _owner_folders(self) -> builtins.list[str]:
        if not self._root.is_dir():
            return []
        return sorted(p.name for p in self._root.iterdir() if p.is_dir() and _OWNER.match(p.name))

    def _state(self, owner: str) -> dict[str, Any]:
        return _read_json(self._folder(owner) / STATE, {})

    def _digest_items(self, owner: str) -> builtins.list[dict[str, Any]]:
        return _read_json(self._folder(owner) / DIGESTS, [])

    def _erasures(self) -> dict[str, Any]:
        return _read_json(self._root / ERASURES, {})

    def _epoch(self, owner: str) -> int:
        entry = self._erasures().get(owner)
        return int(entry.get("epoch", 0)) if isinstance(entry, dict) else 0

    def _check_epoch(self, owner: str, expected: int | None) -> None:
        if expected is not None and (current := self._epoch(owner)) != expected:
            raise OwnerErased(current)

    def _read_sync(self, owner: str) -> Snapshot:
        state = self._state(owner)
        now = time.time()
        out = []
        for scope, name in FILES.items():
            meta = state.get(scope)
            path = self._folder(owner) / name
            if not meta or meta.get("expires_at", 0) <= now or not path.exists():
                continue
            content = path.read_text(encoding="utf-8")
            out.append((MemoryDocument(scope, content, int(meta["revision"]), "markdown", meta.get("updated_at")),
                        float(meta["expires_at"])))
        return out

    def _install(self, owner: str, snapshot: Snapshot) -> None:
        """Make the cache hold exactly `snapshot`, read with the lock held after a change; reads that were
        in flight before it are dropped when they land (forget() moves the owner's generation on)."""
        self._cache.forget(owner)
        if snapshot:
            self._cache.replace(owner, snapshot)

    # ---- reads -----------------------------------------------------------------------------------

    def list(self, owner_id: str, options: ListOptions) -> Sequence[MemoryDocument]:
        return self._cache.get(owner_id, options)

    async def prefetch(self, owner_id: str) -> None:
        generation = self._cache.generation(owner_id)
        snapshot = await self._shared(partial(self._read_sync, owner_id))
        self._cache.replace(owner_id, snapshot, generation)

    async def load(self, owner_id: str) -> builtins.list[MemoryDocument]:
        return [d for d, _ in await self._shared(partial(self._read_sync, owner_id))]

    def invalidate(self, owner_id: str) -> None:
        self._cache.forget(owner_id)

    async def erasure_epoch(self, owner_id: str) -> int:
        self._folder(owner_id)
        return await self._shared(partial(self._epoch, owner_id))

    # ---- writes ----------------------------------------------------------------------------------

    async def apply(self, owner_id: str, changes: Sequence[MemoryChange], context: ChangeContext) -> ApplyResult:
        written, snapshot = await self._exclusive(partial(self._apply_sync, owner_id, list(changes), context))
        self._install(owner_id, snapshot)
        return ApplyResult(len(written), written)

    def _apply_sync(self, owner: str, changes: builtins.list[MemoryChange],
                    context: ChangeContext) -> tuple[builtins.list[MemoryDocument], Snapshot]:
        self._check_epoch(owner, context.erasure_epoch)
        folder = self._folder(owner)
        state = self._state(owner)
        now = time.time()
        for change in changes:
            meta = state.get(change.scope) or {}
            current = int(meta.get("revision", 0)) if meta.get("expires_at", 0) > now else 0
            if current != change.base_revision:
                raise RevisionConflict(change.scope, current)
        folder.mkdir(parents=True, exist_ok=True)
        expires_at = now + (context.retention_s or self._retention_s)
        written = []
        for change in changes:
            revision = change.base_revision + 1
            write_atomically(folder / FILES[change.scope], change.content)
            state[change.scope] = {"revision": revision, "updated_at": now, "expires_at": expires_at}
            written.append(MemoryDocument(change.scope, change.content, revision, "markdown", now))
        write_atomically(folder / STATE, json.dumps(state))
        return written, self._read_sync(owner)

    async def add_session_digest(self, owner_id: str, digest: SessionDigest, retention_s: float, *,
                                 erasure_epoch: int | None = None, max_per_owner: int = 200) -> None:
        def add() -> None:
            self._check_epoch(owner_id, erasure_epoch)
            folder = self._folder(owner_id)
            folder.mkdir(parents=True, exist_ok=True)
            now = time.time()
            items = [i for i in self._digest_items(owner_id) if i.get("expires_at", 0) > now]
            items.append({"session_id": digest.session_id, "topics": digest.topics, "gist": digest.gist[:50],
                          "actions": digest.actions, "created_at": digest.created_at,
                          "expires_at": now + retention_s})
            items.sort(key=lambda i: i.get("created_at", 0))  # stable: equal times keep their order
            write_atomically(folder / DIGESTS, json.dumps(items[-max_per_owner:]))

        self._folder(owner_id)
        await self._exclusive(add)

    async def session_digests(self, owner_id: str, limit: int = 5) -> builtins.list[SessionDigest]:
        items = await asyncio.to_thread(self._digest_items, owner_id)  # one file, replaced atomically
        now = time.time()
        live = sorted((i for i in items if i.get("expires_at", 0) > now), key=lambda i: i["created_at"], reverse=True)
        return [_digest(i) for i in live[:limit]]

    async def scrub_session_digests(self, owner_id: str, words: set[str]) -> int:
        """A fact was forgotten: every digest entry of the owner (expired ones too) loses what states it;
        returns how many changed or went."""
        def scrub() -> int:
            kept, changed = [], 0
            for item in self._digest_items(owner_id):
                scrubbed = forget_in_session_digest(_digest(item), words)
                if scrubbed is None:
                    changed += 1
                    continue
                if scrubbed.topics != item.get("topics") or scrubbed.gist != item.get("gist"):
                    changed += 1
                    item = {**item, "topics": scrubbed.topics, "gist": scrubbed.gist}
                kept.append(item)
            if changed:
                _write_or_remove(self._folder(owner_id) / DIGESTS, kept)
            return changed

        self._folder(owner_id)
        return await self._exclusive(scrub)

    # ---- erasure and retention -------------------------------------------------------------------

    async def delete_owner(self, owner_id: str) -> dict[str, int]:
        """Remove the owner's folder and raise its erasure epoch; returns the files removed, by name."""
        self._folder(owner_id)
        try:
            return await self._exclusive(partial(self._delete_sync, owner_id))
        finally:
            self._cache.forget(owner_id)

    def _delete_sync(self, owner: str) -> dict[str, int]:
        erasures = self._erasures()
        # The epoch goes up before the files go: a crash in between leaves the owner still to erase, but
        # never a writer that started earlier able to land.
        erasures[owner] = {"epoch": self._epoch(owner) + 1, "erased_at": time.time()}
        write_atomically(self._root / ERASURES, json.dumps(erasures))
        folder = self._folder(owner)
        removed: dict[str, int] = {}
        if folder.is_dir():
            for path in folder.iterdir():
                if path.is_file():
                    removed[path.name] = removed.get(path.name, 0) + 1
            shutil.rmtree(folder)
        return removed

    async def purge_expired(self) -> dict[str, int]:
        """Remove every expired document and digest entry, and an owner's folder once nothing of it lives.

        One owner per critical section, so a sweep of many owners never holds up a call's read for long.
        """
        totals = {"documents": 0, "session_digests": 0, "owners": 0}
        for owner in await asyncio.to_thread(self._owner_folders):
            removed, snapshot = await self._exclusive(partial(self._purge_owner_sync, owner, time.time()))
            if any(removed.values()):  # a live call keeps what still lives; nobody else gets an entry
                self._install(owner, snapshot if self._cache.known(owner) else [])
            for key, count in removed.items():
                totals[key] += count
        await self._exclusive(partial(self._prune_erasures_sync, time.time()))
        return totals

    def _purge_owner_sync(self, owner: str, now: float) -> tuple[dict[str, int], Snapshot]:
        folder = self._folder(owner)
        removed = {"documents": 0, "session_digests": 0, "owners": 0}
        if not folder.is_dir():
            return removed, []
        state = self._state(owner)
        stale_state = False
        for scope, name in FILES.items():
            meta = state.get(scope)
            path = folder / name
            if isinstance(meta, dict) and meta.get("expires_at", 0) > now and path.exists():
                continue
            if path.exists():  # expired, or a file no state describes (never served, so never kept)
                path.unlink()
                removed["documents"] += 1
            if state.pop(scope, None) is not None:
                stale_state = True
        items = self._digest_items(owner)
        kept = [i for i in items if i.get("expires_at", 0) > now]
        removed["session_digests"] = len(items) - len(kept)
        if not kept and not any(scope in state for scope in FILES):
            shutil.rmtree(folder)
            removed["owners"] = 1
            return removed, []
        # With the lock held no write is half-way anywhere, so a dot file here is a temporary file a crash
        # left behind, holding text that would otherwise outlive its retention.
        for leftover in folder.glob(".*"):
            leftover.unlink(missing_ok=True)
        if stale_state:
            _write_or_remove(folder / STATE, state)
        if not any(removed.values()):
            return removed, []
        if removed["session_digests"]:
            _write_or_remove(folder / DIGESTS, kept)
        return removed, self._read_sync(owner)

    def _prune_erasures_sync(self, now: float) -> None:
        """Forget epochs older than the fence: by then no writer that started before them is alive."""
        erasures = self._erasures()
        kept = {owner: entry for owner, entry in erasures.items()
                if isinstance(entry, dict) and entry.get("erased_at", 0) + self._fence_s > now}
        if kept != erasures:
            _write_or_remove(self._root / ERASURES, kept)

    # ---- owner-wide questions --------------------------------------------------------------------

    async def export_owner(self, owner_id: str,
                           progress: Progress | None = None) -> dict[str, builtins.list[dict[str, Any]]]:
        """Everything stored of the owner, expired-but-not-yet-swept included, read in one snapshot."""
        self._folder(owner_id)
        tables = await self._shared(partial(self._export_sync, owner_id))
        report_progress(tables, progress)
        return tables

    def _export_sync(self, owner: str) -> dict[str, builtins.list[dict[str, Any]]]:
        folder = self._folder(owner)
        state = self._state(owner)
        out: dict[str, builtins.list[dict[str, Any]]] = {}
        for scope, name in FILES.items():
            path = folder / name
            meta = state.get(scope) or {}
            out[name] = [{"content": path.read_text(encoding="utf-8"), "revision": meta.get("revision", 0),
                          "updated_at": meta.get("updated_at"), "expires_at": meta.get("expires_at")}
                         ] if path.exists() else []
        out[DIGESTS] = self._digest_items(owner)
        erasure = self._erasures().get(owner)
        if isinstance(erasure, dict):
            out["erasure"] = [{"epoch": erasure.get("epoch"), "erased_at": erasure.get("erased_at")}]
        return out

    async def owners(self, limit: int = 100, offset: int = 0) -> builtins.list[OwnerSummary]:
        def scan() -> builtins.list[OwnerSummary]:
            out = []
            for owner in self._owner_folders():
                documents = self._read_sync(owner)
                if documents:
                    out.append(OwnerSummary(owner, len(documents), sum(len(d.content) for d, _ in documents),
                                            max(d.updated_at or 0 for d, _ in documents),
                                            max(e for _, e in documents)))
            return out[offset : offset + limit]

        return await self._shared(scan)

    async def stored_owner_count(self) -> int:
        """Owners with anything on disk (documents or digests, live or not yet swept)."""
        def count() -> int:
            names = (*FILES.values(), DIGESTS)
            return sum(1 for owner in self._owner_folders()
                       if any((self._root / owner / name).exists() for name in names))

        return await self._shared(count)

    async def key_fingerprint(self) -> str | None:
        def read() -> str | None:
            try:
                return (self._root / FINGERPRINT).read_text(encoding="utf-8").strip() or None
            except FileNotFoundError:
                return None

        return await asyncio.to_thread(read)

    async def set_key_fingerprint(self, fingerprint: str) -> None:
        await self._exclusive(partial(write_atomically, self._root / FINGERPRINT, fingerprint.strip() + "\n"))

    def health(self) -> Health:
        return Health(True, str(self._root))

    async def close(self) -> None:
        return None
