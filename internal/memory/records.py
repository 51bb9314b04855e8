"""Plain records the built-in providers share: owner summaries, session digests, a small cache."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from internal.memory.provider import SCOPES, ListOptions, MemoryDocument, Scope


@dataclass(frozen=True, slots=True)
class OwnerSummary:
    owner_key: str
    documents: int
    chars: int
    updated_at: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class SessionDigest:
    session_id: str
    topics: list[str]
    gist: str  # at most 50 characters
    created_at: float = field(default_factory=time.time)


@dataclass(slots=True)
class _Entry:
    documents: dict[Scope, tuple[MemoryDocument, float]]  # scope -> (document, expires_at)


class DocumentCache:
    """The synchronous snapshot behind `list()`: filled by prefetch and by writes, never by a read."""

    def __init__(self, max_owners: int = 10_000) -> None:
        self._entries: dict[str, _Entry] = {}
        self._max_owners = max_owners

    def put(self, owner: str, documents: list[tuple[MemoryDocument, float]]) -> None:
        entry = self._entries.pop(owner, None) or _Entry({})
        for document, expires_at in documents:
            entry.documents[document.scope] = (document, expires_at)
        self._entries[owner] = entry  # most recently used last
        while len(self._entries) > self._max_owners:
            self._entries.pop(next(iter(self._entries)))

    def known(self, owner: str) -> bool:
        return owner in self._entries

    def get(self, owner: str, options: ListOptions) -> list[MemoryDocument]:
        entry = self._entries.get(owner)
        if entry is None:
            return []
        now = time.time()
        out = []
        for scope in options.scopes:
            if scope in entry.documents:
                document, expires_at = entry.documents[scope]
                if expires_at > now:  # an expired record is never served, even from the cache
                    out.append(document)
        return out

    def forget(self, owner: str) -> None:
        self._entries.pop(owner, None)

    def owners(self) -> list[str]:
        return list(self._entries)


def empty_documents() -> dict[Scope, MemoryDocument]:
    return {scope: MemoryDocument(scope) for scope in SCOPES}
