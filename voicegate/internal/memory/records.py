"""Plain records the built-in providers share: owner summaries, session digests, a small cache."""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, field, replace

from voicegate.internal.memory.digest import mentions
from voicegate.internal.memory.provider import ListOptions, MemoryDocument, Scope


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
    # What the agent did on the call (internal/conversation/actions.py): kind, tool or target name, status.
    actions: list[dict[str, str]] = field(default_factory=list)


def forget_in_session_digest(digest: SessionDigest, words: Collection[str]) -> SessionDigest | None:
    """`digest` without what states a forgotten fact: topics that mention one of `words` go, a gist that
    does is cleared (the same exact-word match as the call lines of the `memory` document). The digest
    itself when nothing changes; None when nothing is left of it (no topic, no gist, no action)."""
    forgotten = set(words)
    topics = [topic for topic in digest.topics if not mentions(topic, forgotten)]
    gist = "" if mentions(digest.gist, forgotten) else digest.gist
    if topics == digest.topics and gist == digest.gist:
        return digest
    if not topics and not gist and not digest.actions:
        return None
    return replace(digest, topics=topics, gist=gist)


@dataclass(slots=True)
class _Entry:
    documents: dict[Scope, tuple[MemoryDocument, float]]  # scope -> (document, expires_at)


class DocumentCache:
    """The synchronous snapshot behind `list()`.

    A fresh read *replaces* an owner's entry (a document deleted elsewhere must vanish, not survive a
    merge), and a read that started before the owner was invalidated is dropped: `generation()` is
    taken before the read and `replace()` refuses a stale one. Writes `update()` the scopes they wrote.
    """

    def __init__(self, max_owners: int = 10_000) -> None:
        self._entries: dict[str, _Entry] = {}
        self._generations: dict[str, int] = {}
        self._epoch = 0  # raised by clear(): every read in flight when the whole cache was dropped is stale
        self._max_owners = max_owners

    def generation(self, owner: str) -> tuple[int, int]:
        return self._epoch, self._generations.get(owner, 0)

    def replace(self, owner: str, documents: list[tuple[MemoryDocument, float]],
                generation: tuple[int, int] | None = None) -> bool:
        """Install a fresh read; False (and nothing cached) when the owner was invalidated meanwhile."""
        if generation is not None and generation != self.generation(owner):
            return False
        self._entries.pop(owner, None)
        self._entries[owner] = _Entry({document.scope: (document, expires_at) for document, expires_at in documents})
        self._trim()
        return True

    def update(self, owner: str, documents: list[tuple[MemoryDocument, float]]) -> None:
        """Documents this process has just written (the rest of the entry stays as read)."""
        entry = self._entries.pop(owner, None)
        if entry is None:
            return  # not cached: the next read loads everything fresh
        for document, expires_at in documents:
            entry.documents[document.scope] = (document, expires_at)
        self._entries[owner] = entry
        self._trim()

    def _trim(self) -> None:
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
        self._generations[owner] = self._generations.get(owner, 0) + 1
        if len(self._generations) > 4 * self._max_owners:  # bounded: a cleared map only costs a refetch
            self.clear()

    def clear(self) -> None:
        self._entries.clear()
        self._generations.clear()
        self._epoch += 1

    def owners(self) -> list[str]:
        return list(self._entries)
