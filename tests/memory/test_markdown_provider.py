"""MarkdownProvider on real files: retention per document and per digest, erasure epochs that hold across
processes sharing the directory, the digest cap, export, the owner-key fingerprint and the cache."""

from __future__ import annotations

import asyncio
import json
import random
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from voicegate.internal.memory.provider import ChangeContext, ListOptions, MemoryChange, OwnerErased, Scope
from voicegate.internal.memory.providers.markdown import MarkdownProvider
from voicegate.internal.memory.records import SessionDigest

OWNER = "ab" * 16
OTHER = "cd" * 16
DAY = 86400.0
ALL = ListOptions(max_chars=10_000)


def context(retention_s: float | None = None, epoch: int | None = None) -> ChangeContext:
    return ChangeContext("api", retention_s=retention_s, erasure_epoch=epoch)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "md"


@pytest.fixture
def provider(root: Path) -> MarkdownProvider:
    return MarkdownProvider(root, 90 * DAY)


async def write(provider: MarkdownProvider, scope: Scope, content: str, retention_s: float | None = None,
                owner: str = OWNER) -> None:
    current = {d.scope: d.revision for d in await provider.load(owner)}
    await provider.apply(owner, [MemoryChange(scope, content, current.get(scope, 0))], context(retention_s))


def digest(n: int, at: float | None = None) -> SessionDigest:
    return SessionDigest(f"s{n}", ["topic"], f"gist {n}", at if at is not None else 1_700_000_000.0 + n)


async def test_an_expired_user_md_is_removed_while_memory_md_stays_live_and_readable(
        provider: MarkdownProvider, root: Path) -> None:
    await write(provider, "user", "- Keep replies short.", retention_s=0.3)
    await write(provider, "memory", "- Has a dog named Rex.")
    await asyncio.sleep(0.5)
    assert await provider.purge_expired() == {"documents": 1, "session_digests": 0, "owners": 0}
    folder = root / OWNER
    assert not (folder / "USER.md").exists()
    assert "user" not in json.loads((folder / "state.json").read_text())
    assert [d.content for d in await provider.load(OWNER)] == ["- Has a dog named Rex."]
    await provider.prefetch(OWNER)
    assert [d.scope for d in provider.list(OWNER, ALL)] == ["memory"]


async def test_a_folder_holding_only_unexpired_digests_survives_the_purge(provider: MarkdownProvider,
                                                                          root: Path) -> None:
    await provider.add_session_digest(OWNER, digest(1), DAY)
    assert sorted(p.name for p in (root / OWNER).iterdir()) == ["digests.json"]
    assert sum((await provider.purge_expired()).values()) == 0
    assert [d.session_id for d in await provider.session_digests(OWNER)] == ["s1"]


async def test_expired_digest_entries_are_pruned_and_the_last_one_takes_the_folder(provider: MarkdownProvider,
                                                                                 root: Path) -> None:
    await provider.add_session_digest(OWNER, digest(1), 0.3)
    await provider.add_session_digest(OWNER, digest(2), DAY)
    await provider.add_session_digest(OTHER, digest(3), 0.3)
    await asyncio.sleep(0.5)
    assert await provider.purge_expired() == {"documents": 0, "session_digests": 2, "owners": 1}
    kept = json.loads((root / OWNER / "digests.json").read_text())
    assert [item["session_id"] for item in kept] == ["s2"]
    assert not (root / OTHER).exists()


async def test_a_purge_clears_what_a_crash_left_and_drops_only_what_expired_from_the_cache(
        provider: MarkdownProvider, root: Path) -> None:
    await write(provider, "user", "- Call me Sam.", retention_s=0.3)
    await write(provider, "memory", "- Likes oolong.")
    (root / OWNER / ".MEMORY.md.x1y2z3").write_text("- a half-written old version")  # a crash mid-write
    await provider.prefetch(OWNER)
    await asyncio.sleep(0.5)
    await provider.purge_expired()
    assert sorted(p.name for p in (root / OWNER).iterdir()) == ["MEMORY.md", "state.json"]
    assert [d.scope for d in provider.list(OWNER, ALL)] == ["memory"]  # still served to a live call


async def test_erasure_raises_the_epoch_and_a_write_from_before_it_leaves_nothing_on_disk(
        provider: MarkdownProvider, root: Path) -> None:
    assert await provider.erasure_epoch(OWNER) == 0
    await provider.apply(OWNER, [MemoryChange("memory", "- Likes tea.", 0)], context(epoch=0))
    await provider.add_session_digest(OWNER, digest(1), DAY, erasure_epoch=0)
    removed = await provider.delete_owner(OWNER)
    assert removed == {"MEMORY.md": 1, "state.json": 1, "digests.json": 1}
    assert await provider.erasure_epoch(OWNER) == 1
    assert await MarkdownProvider(root, 90 * DAY).erasure_epoch(OWNER) == 1  # another process sees it
    with pytest.raises(OwnerErased) as erased:
        await provider.apply(OWNER, [MemoryChange("memory", "- Likes tea.", 0)], context(epoch=0))
    assert erased.value.current_epoch == 1
    with pytest.raises(OwnerErased):
        await provider.add_session_digest(OWNER, digest(2), DAY, erasure_epoch=0)
    assert not (root / OWNER).exists()
    assert sum((await provider.delete_owner(OWNER)).values()) == 0  # nothing left; the epoch still moves
    await provider.apply(OWNER, [MemoryChange("memory", "- New start.", 0)], context(epoch=2))
    assert [d.content for d in await provider.load(OWNER)] == ["- New start."]


async def test_the_erasure_record_holds_no_caller_content_and_expires_with_the_retention(root: Path) -> None:
    provider = MarkdownProvider(root, 0.3)
    await provider.apply(OWNER, [MemoryChange("memory", "- Sam likes oolong.", 0)], context())
    await provider.delete_owner(OWNER)
    tombstone = json.loads((root / ".erasures.json").read_text())
    assert list(tombstone) == [OWNER] and sorted(tombstone[OWNER]) == ["epoch", "erased_at"]
    assert "oolong" not in (root / ".erasures.json").read_text()
    await asyncio.sleep(0.5)
    await provider.purge_expired()
    assert not (root / ".erasures.json").exists()
    assert await provider.erasure_epoch(OWNER) == 0


async def test_delete_drops_the_cache_and_a_prefetch_holds_exactly_what_is_on_disk(provider: MarkdownProvider,
                                                                                  root: Path) -> None:
    await write(provider, "user", "- Call me Sam.")
    await write(provider, "memory", "- Likes oolong.")
    await provider.prefetch(OWNER)
    elsewhere = MarkdownProvider(root, 90 * DAY)  # another node on the same volume
    (root / OWNER / "USER.md").unlink()  # as if removed by hand, or by that node
    await provider.prefetch(OWNER)
    assert [d.scope for d in provider.list(OWNER, ALL)] == ["memory"]
    await elsewhere.delete_owner(OWNER)
    await provider.prefetch(OWNER)
    assert provider.list(OWNER, ALL) == []
    await write(provider, "memory", "- Back again.")
    await provider.delete_owner(OWNER)
    assert provider.list(OWNER, ALL) == []


async def test_the_digest_cap_keeps_the_newest(provider: MarkdownProvider) -> None:
    for n in [3, 1, 5, 2, 4, 6]:
        await provider.add_session_digest(OWNER, digest(n), DAY, max_per_owner=3)
    assert [d.session_id for d in await provider.session_digests(OWNER, 10)] == ["s6", "s5", "s4"]


async def test_export_holds_everything_stored_expired_but_not_swept_included(provider: MarkdownProvider,
                                                                            root: Path) -> None:
    await write(provider, "user", "- Call me Sam.", retention_s=0.3)
    await write(provider, "memory", "- Likes oolong.")
    await provider.add_session_digest(OWNER, digest(1), DAY)
    many = json.loads((root / OWNER / "digests.json").read_text()) * 1202  # a long-time caller, written faster
    (root / OWNER / "digests.json").write_text(json.dumps(many))
    await provider.add_session_digest(OWNER, digest(0), 0.3, max_per_owner=5000)
    await asyncio.sleep(0.5)
    seen: list[tuple[str, int]] = []
    export = await provider.export_owner(OWNER, lambda table, rows: seen.append((table, rows)))
    assert export["USER.md"][0]["content"] == "- Call me Sam." and export["USER.md"][0]["revision"] == 1
    assert export["MEMORY.md"][0]["content"] == "- Likes oolong."
    assert len(export["digests.json"]) == 1203 and export["digests.json"][0]["session_id"] == "s0"
    assert "erasure" not in export
    assert seen == [("USER.md", 1), ("MEMORY.md", 1), ("digests.json", 500), ("digests.json", 1000),
                    ("digests.json", 1203)]
    await provider.delete_owner(OWNER)
    export = await provider.export_owner(OWNER)
    assert export["erasure"][0]["epoch"] == 1 and export["USER.md"] == export["digests.json"] == []


async def test_the_owner_key_fingerprint_round_trips_and_stored_owners_are_counted(provider: MarkdownProvider,
                                                                                  root: Path) -> None:
    assert await provider.key_fingerprint() is None
    await provider.set_key_fingerprint("f00d" * 8)
    assert await MarkdownProvider(root, DAY).key_fingerprint() == "f00d" * 8
    assert await provider.stored_owner_count() == 0
    await write(provider, "memory", "- Likes tea.", retention_s=0.01)  # expired, not yet swept: still stored
    await provider.add_session_digest(OTHER, digest(1), DAY)
    await provider.delete_owner("ef" * 16)  # an erasure record is no stored owner
    await asyncio.sleep(0.05)
    assert await provider.stored_owner_count() == 2


# A writer in another process: reads the epoch, then the document, then writes with that epoch (as the
# runtime does), tagging what it writes with the epoch it started from. Alternates documents and digests.
WRITER = """
import asyncio, json, sys
from pathlib import Path
from voicegate.internal.memory.provider import ChangeContext, MemoryChange, OwnerErased, RevisionConflict
from voicegate.internal.memory.providers.markdown import MarkdownProvider
from voicegate.internal.memory.records import SessionDigest

async def main(root: str, owner: str, stop: str) -> None:
    provider = MarkdownProvider(Path(root), 3600)
    counts = {"applied": 0, "erased": 0, "conflict": 0}
    Path(stop + ".ready").touch()
    n = 0
    while not Path(stop).exists():
        n += 1
        epoch = await provider.erasure_epoch(owner)
        docs = {d.scope: d.revision for d in await provider.load(owner)}
        text = f"epoch {epoch} write {n}"
        try:
            if n % 2:
                await provider.apply(owner, [MemoryChange("memory", text, docs.get("memory", 0))],
                                     ChangeContext("digest", erasure_epoch=epoch))
            else:
                await provider.add_session_digest(owner, SessionDigest(f"s{n}", [], text), 3600, erasure_epoch=epoch)
            counts["applied"] += 1
        except OwnerErased:
            counts["erased"] += 1
        except RevisionConflict:
            counts["conflict"] += 1
    print(json.dumps(counts))

asyncio.run(main(*sys.argv[1:]))
"""


def assert_nothing_from_before_the_last_erasure(export: dict[str, list[dict[str, object]]]) -> None:
    epoch = export["erasure"][0]["epoch"] if "erasure" in export else 0
    texts = [str(d["content"]) for d in export["MEMORY.md"]] + [str(d["gist"]) for d in export["digests.json"]]
    assert all(text.startswith(f"epoch {epoch} ") for text in texts), (epoch, texts)


async def test_a_write_racing_a_delete_from_another_process_never_resurrects_the_owner(root: Path,
                                                                                    tmp_path: Path) -> None:
    provider = MarkdownProvider(root, 3600)
    stop = tmp_path / "stop"
    writer = await asyncio.create_subprocess_exec(sys.executable, "-c", WRITER, str(root), OWNER, str(stop),
                                                  cwd=REPO, stdout=asyncio.subprocess.PIPE)
    try:
        async with asyncio.timeout(15):
            while not Path(f"{stop}.ready").exists():
                await asyncio.sleep(0.02)
        chance = random.Random(7)
        for _ in range(500):
            await provider.delete_owner(OWNER)
            assert_nothing_from_before_the_last_erasure(await provider.export_owner(OWNER))
            await asyncio.sleep(chance.uniform(0, 0.006))
    finally:
        stop.touch()
        output, _ = await asyncio.wait_for(writer.communicate(), 15)
    assert writer.returncode == 0
    counts = json.loads(output)
    assert counts["applied"] > 0 and counts["erased"] > 0, counts  # the race really happened, both ways
    assert_nothing_from_before_the_last_erasure(await provider.export_owner(OWNER))
