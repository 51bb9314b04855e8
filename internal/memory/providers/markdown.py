"""The Markdown provider: USER.md and MEMORY.md per owner in a directory, written atomically.

Handy when an operator wants to read or hand-edit what is remembered. Each owner has a folder named by
its owner key (never a phone number) holding USER.md, MEMORY.md and state.json (revisions and expiry).
A write goes to a temporary file that is fsynced and renamed over the old one, so a crash mid-write
leaves the previous version, never half a document.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
from internal.memory.records import DocumentCache, OwnerSummary, SessionDigest

FILES: dict[Scope, str] = {"user": "USER.md", "memory": "MEMORY.md"}
_OWNER = re.compile(r"^[0-9a-f]{16,128}$")


def write_atomically(path: Path, data: str) -> None:
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class MarkdownProvider:
    def __init__(self, directory: Path, retention_s: float) -> None:
        self._root = directory
        self._retention_s = retention_s
        self._cache = DocumentCache()
        self._lock = asyncio.Lock()

    def describe(self) -> ProviderDescription:
        return ProviderDescription(key="markdown", label="Markdown files (USER.md, MEMORY.md)")

    def _folder(self, owner: str) -> Path:
        if not _OWNER.match(owner):
            raise ValueError("owner keys are hexadecimal")
        return self._root / owner

    def _state(self, owner: str) -> dict[str, Any]:
        path = self._folder(owner) / "state.json"
        try:
            state: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            return state
        except (FileNotFoundError, ValueError):
            return {}

    def _read_sync(self, owner: str) -> builtins.list[tuple[MemoryDocument, float]]:
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

    def list(self, owner_id: str, options: ListOptions) -> Sequence[MemoryDocument]:
        return self._cache.get(owner_id, options)

    async def prefetch(self, owner_id: str) -> None:
        self._cache.put(owner_id, await asyncio.to_thread(self._read_sync, owner_id))

    async def load(self, owner_id: str) -> builtins.list[MemoryDocument]:
        return [d for d, _ in await asyncio.to_thread(self._read_sync, owner_id)]

    async def apply(self, owner_id: str, changes: Sequence[MemoryChange], context: ChangeContext) -> ApplyResult:
        async with self._lock:
            return await asyncio.to_thread(self._apply_sync, owner_id, list(changes), context)

    def _apply_sync(self, owner: str, changes: builtins.list[MemoryChange], context: ChangeContext) -> ApplyResult:
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
            written.append((MemoryDocument(change.scope, change.content, revision, "markdown", now), expires_at))
        write_atomically(folder / "state.json", json.dumps(state))
        self._cache.put(owner, written)
        return ApplyResult(len(written), [d for d, _ in written])

    async def delete_owner(self, owner_id: str) -> dict[str, int]:
        folder = self._folder(owner_id)
        files = len(list(folder.iterdir())) if folder.exists() else 0
        await asyncio.to_thread(shutil.rmtree, folder, True)
        self._cache.forget(owner_id)
        return {"files": files}

    async def purge_expired(self) -> dict[str, int]:
        def purge() -> int:
            removed = 0
            if not self._root.exists():
                return 0
            now = time.time()
            for folder in self._root.iterdir():
                if not folder.is_dir() or not _OWNER.match(folder.name):
                    continue
                state = self._state(folder.name)
                if all(meta.get("expires_at", 0) <= now for meta in state.values() if isinstance(meta, dict)):
                    shutil.rmtree(folder, ignore_errors=True)
                    self._cache.forget(folder.name)
                    removed += 1
            return removed

        return {"owners": await asyncio.to_thread(purge)}

    async def owners(self, limit: int = 100, offset: int = 0) -> builtins.list[OwnerSummary]:
        def scan() -> builtins.list[OwnerSummary]:
            out = []
            for folder in sorted(self._root.iterdir()) if self._root.exists() else []:
                if folder.is_dir() and _OWNER.match(folder.name):
                    documents = self._read_sync(folder.name)
                    if documents:
                        out.append(OwnerSummary(folder.name, len(documents), sum(len(d.content) for d, _ in documents),
                                                max(d.updated_at or 0 for d, _ in documents),
                                                max(e for _, e in documents)))
            return out[offset : offset + limit]

        return await asyncio.to_thread(scan)

    async def add_session_digest(self, owner_id: str, digest: SessionDigest, retention_s: float) -> None:
        def add() -> None:
            folder = self._folder(owner_id)
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / "digests.json"
            items = json.loads(path.read_text()) if path.exists() else []
            items.append({"session_id": digest.session_id, "topics": digest.topics, "gist": digest.gist[:50],
                          "created_at": digest.created_at, "expires_at": time.time() + retention_s})
            write_atomically(path, json.dumps(items))

        async with self._lock:
            await asyncio.to_thread(add)

    async def session_digests(self, owner_id: str, limit: int = 5) -> builtins.list[SessionDigest]:
        path = self._folder(owner_id) / "digests.json"
        if not path.exists():
            return []
        now = time.time()
        items = [i for i in json.loads(path.read_text()) if i["expires_at"] > now]
        items.sort(key=lambda i: i["created_at"], reverse=True)
        return [SessionDigest(i["session_id"], i["topics"], i["gist"], i["created_at"]) for i in items[:limit]]

    def health(self) -> Health:
        return Health(True, str(self._root))

    async def close(self) -> None:
        return None
