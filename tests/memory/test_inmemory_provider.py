"""InMemoryProvider: history as metadata with its own expiry, erasure epochs, the digest cap, export and
the owner-key fingerprint (the same promises the stores that outlive a process keep)."""

from __future__ import annotations

import asyncio
import json

import pytest

from voicegate.internal.memory.provider import ChangeContext, MemoryChange, OwnerErased, Scope
from voicegate.internal.memory.providers.inmemory import InMemoryProvider
from voicegate.internal.memory.records import SessionDigest

OWNER = "ab" * 16
OTHER = "cd" * 16
DAY = 86400.0


def context(retention_s: float | None = None, epoch: int | None = None) -> ChangeContext:
    return ChangeContext("tool", "call-1", retention_s=retention_s, erasure_epoch=epoch)


async def write(provider: InMemoryProvider, scope: Scope, content: str, retention_s: float | None = None,
                owner: str = OWNER) -> None:
    current = {d.scope: d.revision for d in await provider.load(owner)}
    await provider.apply(owner, [MemoryChange(scope, content, current.get(scope, 0))], context(retention_s))


def digest(n: int) -> SessionDigest:
    return SessionDigest(f"s{n}", ["topic"], f"gist {n}", 1_700_000_000.0 + n)


async def test_history_records_that_a_document_changed_never_what_it_said() -> None:
    provider = InMemoryProvider(DAY)
    await write(provider, "memory", "- Sam likes oolong.")
    await write(provider, "memory", "- Sam likes green tea.")
    await write(provider, "memory", "")
    history = provider.history(OWNER, "memory")
    assert [(h.revision, h.source, h.session_id, h.char_count) for h in history] == [
        (1, "tool", "call-1", 19), (2, "tool", "call-1", 22), (3, "tool", "call-1", 0)]
    exported = json.dumps((await provider.export_owner(OWNER))["memory_history"])
    assert "oolong" not in exported and "green tea" not in exported


async def test_history_entries_expire_by_their_own_age_not_the_latest_write() -> None:
    provider = InMemoryProvider(DAY)
    await write(provider, "memory", "- Short-lived.", retention_s=0.3)
    await write(provider, "memory", "- Kept.", retention_s=DAY)
    await asyncio.sleep(0.5)
    assert [h.revision for h in provider.history(OWNER, "memory")] == [2]
    assert await provider.purge_expired() == {"memories": 0, "memory_history": 1, "session_digests": 0,
                                              "memory_tasks": 0}
    assert [row["revision"] for row in (await provider.export_owner(OWNER))["memory_history"]] == [2]


async def test_expired_documents_and_digests_are_purged_each_by_their_own_expiry() -> None:
    provider = InMemoryProvider(DAY)
    await write(provider, "user", "- Call me Sam.", retention_s=0.3)
    await write(provider, "memory", "- Likes tea.")
    await provider.add_session_digest(OWNER, digest(1), 0.3)
    await provider.add_session_digest(OWNER, digest(2), DAY)
    await asyncio.sleep(0.5)
    assert await provider.purge_expired() == {"memories": 1, "memory_history": 1, "session_digests": 1,
                                              "memory_tasks": 0}
    assert [d.scope for d in await provider.load(OWNER)] == ["memory"]
    assert [d.session_id for d in await provider.session_digests(OWNER)] == ["s2"]


async def test_erasure_raises_the_epoch_and_a_write_from_before_it_is_refused() -> None:
    provider = InMemoryProvider(DAY)
    assert await provider.erasure_epoch(OWNER) == 0
    await provider.apply(OWNER, [MemoryChange("memory", "- Likes tea.", 0)], context(epoch=0))
    await write(provider, "memory", "- Likes coffee.")
    await provider.add_session_digest(OWNER, digest(1), DAY, erasure_epoch=0)
    assert await provider.delete_owner(OWNER) == {"memories": 1, "memory_history": 2, "session_digests": 1,
                                            "memory_tasks": 0}
    assert await provider.erasure_epoch(OWNER) == 1
    with pytest.raises(OwnerErased) as erased:
        await provider.apply(OWNER, [MemoryChange("memory", "- Likes tea.", 0)], context(epoch=0))
    assert erased.value.current_epoch == 1
    with pytest.raises(OwnerErased):
        await provider.add_session_digest(OWNER, digest(2), DAY, erasure_epoch=0)
    export = await provider.export_owner(OWNER)
    assert export["memories"] == export["memory_history"] == export["session_digests"] == []
    assert [row["epoch"] for row in export["memory_erasures"]] == [1]
    await provider.apply(OWNER, [MemoryChange("memory", "- New start.", 0)], context(epoch=1))
    assert [d.content for d in await provider.load(OWNER)] == ["- New start."]


async def test_an_erasure_is_forgotten_after_the_retention() -> None:
    provider = InMemoryProvider(0.3)
    await provider.delete_owner(OWNER)
    await asyncio.sleep(0.5)
    await provider.purge_expired()
    assert await provider.erasure_epoch(OWNER) == 0


async def test_the_digest_cap_keeps_the_newest() -> None:
    provider = InMemoryProvider(DAY)
    for n in [3, 1, 5, 2, 4, 6]:
        await provider.add_session_digest(OWNER, digest(n), DAY, max_per_owner=3)
    assert [d.session_id for d in await provider.session_digests(OWNER, 10)] == ["s6", "s5", "s4"]


async def test_export_holds_everything_expired_but_not_swept_included_with_progress() -> None:
    provider = InMemoryProvider(DAY)
    await write(provider, "user", "- Call me Sam.", retention_s=0.3)
    for n in range(1001):
        await provider.add_session_digest(OWNER, digest(n), DAY, max_per_owner=5000)
    await asyncio.sleep(0.5)
    seen: list[tuple[str, int]] = []
    export = await provider.export_owner(OWNER, lambda table, rows: seen.append((table, rows)))
    assert export["memories"][0]["content"] == "- Call me Sam." and len(export["session_digests"]) == 1001
    assert seen == [("memories", 1), ("memory_history", 1), ("session_digests", 500), ("session_digests", 1000),
                    ("session_digests", 1001), ("memory_tasks", 0), ("memory_erasures", 0)]


async def test_the_owner_key_fingerprint_round_trips_and_stored_owners_are_counted() -> None:
    provider = InMemoryProvider(DAY)
    assert await provider.key_fingerprint() is None
    await provider.set_key_fingerprint("f00d" * 8)
    assert await provider.key_fingerprint() == "f00d" * 8
    await write(provider, "memory", "- Likes tea.", retention_s=0.01)  # expired, not yet swept: still stored
    await provider.add_session_digest(OTHER, digest(1), DAY)
    await provider.delete_owner("ef" * 16)
    await asyncio.sleep(0.05)
    assert await provider.stored_owner_count() == 2
