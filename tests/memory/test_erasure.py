"""Erasure every writer respects, on PostgreSQL: two runtimes with their own pools and caches stand for
two processes sharing one database (tests/memory/test_erasure_processes.py does it with real servers).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.memory.conftest import RETENTION_S, make_runtime
from voicegate.internal.config.providers import PgvectorConfig
from voicegate.internal.db import Database
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.memory.adapters import adapt
from voicegate.internal.memory.digest import merge_digest
from voicegate.internal.memory.owner import OwnerKeySecretError, OwnerSecret, fingerprint, read_secret, secret_problem
from voicegate.internal.memory.provider import ChangeContext
from voicegate.internal.memory.providers.pgvector import PgvectorProvider
from voicegate.internal.memory.records import SessionDigest
from voicegate.internal.memory.runtime import CallerErased, FrontendMemoryRuntime

SAM = CallerIdentity("sip", "+15551234567")
API = ChangeContext("api")


@pytest.fixture
async def two_runtimes(fresh_db: str, tmp_path: Path, embedder: Any,
                       ) -> AsyncIterator[tuple[FrontendMemoryRuntime, FrontendMemoryRuntime]]:
    databases = [Database(PgvectorConfig(connection_string=fresh_db), tmp_path / name) for name in "ab"]
    for database in databases:
        await database.open()
    runtimes = [make_runtime(PgvectorProvider(database, embedder, RETENTION_S), tmp_path / name)
                for database, name in zip(databases, "ab", strict=True)]
    yield runtimes[0], runtimes[1]
    for database in databases:
        await database.close()


def key(runtime: FrontendMemoryRuntime) -> str:
    owner = runtime.owner_key(SAM)
    assert owner is not None
    return owner


async def table_text(uri: str) -> str:
    """Every row of every memory table as text (what a dump of them would show)."""
    async with await psycopg.AsyncConnection.connect(uri) as conn:
        parts = []
        for table in ("memories", "memory_items", "memory_history", "session_digests", "memory_erasures"):
            cursor = await conn.execute(f"SELECT * FROM {table}")
            parts.extend(repr(row) for row in await cursor.fetchall())
        return "\n".join(parts)


async def test_a_write_begun_before_an_erasure_never_lands_after_it(two_runtimes: Any) -> None:
    writer, eraser = two_runtimes
    owner = key(writer)
    await writer.edit(owner, "memory", "append", content="- Old fact zanzibar.", context=API)
    call_epoch = await writer.epoch(owner)  # a call starts: it records the epoch
    await eraser.delete_owner(owner)
    with pytest.raises(CallerErased):
        await writer.set_document(owner, "memory", "", ChangeContext("digest", "s1", erasure_epoch=call_epoch),
                                  transform=lambda d: merge_digest(d.content, "talked about zanzibar", 2000))
    with pytest.raises(CallerErased):
        await writer.edit(owner, "memory", "append", content="- New fact.",
                          context=ChangeContext("tool", "s1", erasure_epoch=call_epoch))
    with pytest.raises(CallerErased):
        await writer.add_session_digest(owner, SessionDigest("s1", ["zanzibar"], "zanzibar"), RETENTION_S,
                                        ChangeContext("digest", "s1", erasure_epoch=call_epoch))
    assert (await writer.latest(owner))["memory"].revision == 0
    # After the erasure the caller may start over: a writer that starts now writes.
    fresh = await writer.edit(owner, "memory", "append", content="- Starting over.", context=API)
    assert fresh.changed and fresh.documents["memory"].revision == 1


async def test_writes_and_deletes_racing_never_resurrect(two_runtimes: Any, fresh_db: str) -> None:
    writer, eraser = two_runtimes
    owner = key(writer)
    rng = random.Random(7)
    for round_ in range(40):
        await writer.edit(owner, "memory", "append", content=f"- Before erasure {round_}.", context=API)
        call_epoch = await writer.epoch(owner)

        async def late_write(delay: float, epoch: int = call_epoch, round_: int = round_) -> None:
            await asyncio.sleep(delay)
            try:
                await writer.set_document(owner, "memory", "", ChangeContext("digest", f"s{round_}",
                                                                             erasure_epoch=epoch),
                                          transform=lambda d: merge_digest(d.content, f"call {round_}", 2000))
            except CallerErased:
                pass

        async def erase(delay: float) -> None:
            await asyncio.sleep(delay)
            await eraser.delete_owner(owner)

        await asyncio.gather(late_write(rng.uniform(0, 0.004)), erase(rng.uniform(0, 0.004)))
        # Whichever came first, the erasure wins: nothing from before it survives, in either process.
        for runtime in (writer, eraser):
            assert (await runtime.latest(owner))["memory"].content == "", f"round {round_}"
        assert "Before erasure" not in await table_text(fresh_db)


async def test_a_fresh_read_replaces_the_cache_so_a_deletion_elsewhere_shows(two_runtimes: Any) -> None:
    server, cli = two_runtimes
    owner = key(server)
    await server.edit(owner, "user", "append", content="- Call me Sam.", context=API)
    await server.edit(owner, "memory", "append", content="- Fact.", context=API)
    assert server.documents(owner)["memory"].content == "- Fact."  # cached in the server
    await cli.delete_owner(owner)
    assert (await server.latest(owner))["memory"].revision == 0  # GET reads fresh, never merged
    assert server.documents(owner)["user"].content == ""
    # and later edits of that owner work (they used to get 409 forever)
    outcome = await server.edit(owner, "memory", "append", content="- Again.", expected_revision=0, context=API)
    assert outcome.documents["memory"].revision == 1


async def test_removed_text_is_in_no_table_and_history_ages_on_its_own(two_runtimes: Any, fresh_db: str) -> None:
    runtime, _ = two_runtimes
    owner = key(runtime)
    await runtime.edit(owner, "memory", "append", content="- Locker code word is zanzibar.", context=API)
    await runtime.edit(owner, "memory", "append", content="- Likes tea.", context=API)
    await runtime.edit(owner, "memory", "replace", old_text="- Locker code word is zanzibar.\n", new_text="",
                       context=API)
    assert "zanzibar" not in await table_text(fresh_db)
    async with await psycopg.AsyncConnection.connect(fresh_db) as conn:
        cursor = await conn.execute("SELECT revision, source, expires_at FROM memory_history ORDER BY revision")
        history = await cursor.fetchall()
    assert [row[:2] for row in history] == [(1, "api"), (2, "api"), (3, "api")]
    assert history[0][2] < history[2][2]  # each revision keeps its own expiry


async def test_session_digests_are_capped_per_owner(two_runtimes: Any, tmp_path: Path) -> None:
    runtime, _ = two_runtimes
    runtime.config.max_session_digests = 3
    owner = key(runtime)
    for n in range(5):
        await runtime.add_session_digest(owner, SessionDigest(f"s{n}", [], f"call {n}"), RETENTION_S, API)
    kept = await runtime.provider.session_digests(owner, 10)
    assert [d.gist for d in kept] == ["call 4", "call 3", "call 2"]


async def test_export_holds_every_table_without_a_cap(two_runtimes: Any) -> None:
    runtime, _ = two_runtimes
    owner = key(runtime)
    await runtime.edit(owner, "memory", "append", content="- One.\n- Two.", context=API)
    for n in range(1200):  # more than the old 1000-digest cap
        await runtime.provider.add_session_digest(owner, SessionDigest(f"s{n}", [], f"g{n}"), RETENTION_S,
                                                  max_per_owner=5000)
    seen: list[tuple[str, int]] = []
    tables = await runtime.export(owner, lambda table, rows: seen.append((table, rows)))
    assert len(tables["session_digests"]) == 1200
    assert [row["text"] for row in tables["memory_items"]] == ["One.", "Two."]
    assert len(tables["memory_items"][0]["embedding"]) == 256
    assert [row["revision"] for row in tables["memory_history"]] == [1]
    assert ("session_digests", 1200) in seen  # progress was reported


async def test_per_owner_locks_are_dropped_when_idle(two_runtimes: Any) -> None:
    runtime, _ = two_runtimes
    for n in range(20):
        owner = runtime.keys.for_resource_id(f"jwt:user{n}")
        await runtime.edit(owner, "memory", "append", content="- x", context=API)
    assert len(runtime._locks) == 0


# ---- the owner-key secret -------------------------------------------------------------------------


def test_a_new_secret_while_owners_are_stored_is_refused_with_the_fix(tmp_path: Path) -> None:
    new = read_secret("", tmp_path)
    assert new.created and not (tmp_path / "owner-key.secret").exists()  # not written until accepted
    problem = secret_problem(new, fingerprint(b"old"), 3)
    assert problem is not None and str(tmp_path / "owner-key.secret") in problem and "Restore" in problem
    assert secret_problem(new, None, 0) is None
    wrong = OwnerSecret(b"other", "memory.owner_key_secret", False)
    assert "not the one" in (secret_problem(wrong, fingerprint(b"old"), 1) or "")
    assert secret_problem(OwnerSecret(b"old", "memory.owner_key_secret", False), fingerprint(b"old"), 1) is None


async def test_the_store_remembers_the_secret_and_refuses_another(fresh_db: str, tmp_path: Path,
                                                                  embedder: Any) -> None:
    database = Database(PgvectorConfig(connection_string=fresh_db), tmp_path)
    await database.open()
    try:
        provider = PgvectorProvider(database, embedder, RETENTION_S)
        first = read_secret("", tmp_path / "data")
        runtime = FrontendMemoryRuntime(adapt(provider), make_runtime(provider, tmp_path).config,
                                        make_runtime(provider, tmp_path).keys, secret=first)
        await runtime.verify_owner_key()  # nothing stored: accepted, written, fingerprint recorded
        assert (tmp_path / "data" / "owner-key.secret").read_bytes() == first.value
        assert await provider.key_fingerprint() == fingerprint(first.value)
        await runtime.edit(runtime.keys.for_resource_id("jwt:alice"), "memory", "append", content="- x",
                           context=API)
        (tmp_path / "data" / "owner-key.secret").unlink()  # lost, or a run from another directory
        lost = FrontendMemoryRuntime(adapt(provider), runtime.config, runtime.keys,
                                     secret=read_secret("", tmp_path / "data"))
        with pytest.raises(OwnerKeySecretError, match="is missing"):
            await lost.verify_owner_key()
        assert not (tmp_path / "data" / "owner-key.secret").exists()  # nothing was replaced
        other = FrontendMemoryRuntime(adapt(provider), runtime.config, runtime.keys,
                                      secret=OwnerSecret(b"another", "memory.owner_key_secret", False))
        with pytest.raises(OwnerKeySecretError, match="not the one"):
            await other.verify_owner_key()
    finally:
        await database.close()


async def test_the_erasure_fence_outlives_a_short_retention_and_the_outbox(tmp_path: Path, fresh_db: str) -> None:
    """retention_days below a day: a hang-up write begun before an erasure still cannot land after a
    sweep, on every built-in provider (the fence lasts past the outbox's oldest entry, not the retention)."""
    from tests.memory.conftest import base_config
    from voicegate.internal.memory.setup import build_provider

    config = base_config(tmp_path)
    config.memory.enabled, config.memory.retention_days, config.memory.outbox_max_age_h = True, 1e-5, 24.0
    config.pgvector.connection_string = fresh_db
    assert config.memory.erasure_fence_s >= 24 * 3600 + 86400
    database = Database(PgvectorConfig(connection_string=fresh_db), tmp_path / "db")
    await database.open()
    try:
        for kind in ("memory", "markdown", "pgvector"):
            config.memory.provider = kind
            runtime = make_runtime(build_provider(config, database), tmp_path / kind,
                                   retention_days=config.memory.retention_days)
            owner = key(runtime)
            await runtime.edit(owner, "memory", "append", content="- Old fact zanzibar.", context=API)
            call_epoch = await runtime.epoch(owner)
            await runtime.delete_owner(owner)
            await asyncio.sleep(1.0)  # past the retention (0.86 s)
            await runtime.purge_expired()
            with pytest.raises(CallerErased):
                await runtime.set_document(owner, "memory", "", ChangeContext("digest", "s1", erasure_epoch=call_epoch),
                                           transform=lambda current: merge_digest(current.content, "zanzibar", 2000))
            assert (await runtime.latest(owner))["memory"].revision == 0, kind
    finally:
        await database.close()


async def test_a_plain_text_document_stays_plain_text_through_edits_and_digests(two_runtimes: Any,
                                                                                fresh_db: str) -> None:
    """A document stored as plain text (imported, or written by another tool) never gets Markdown from
    us: its digest section has a plain heading, edits keep its format, a read says "text"."""
    writer, other = two_runtimes
    owner = key(writer)
    await writer.edit(owner, "memory", "append", content="- The caller has a dog named Rex.", context=API)
    async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as conn:
        await conn.execute("UPDATE memories SET format = 'text' WHERE owner_key = %s", (owner,))
    writer.provider.invalidate(owner)
    await writer.set_document(owner, "memory", "", ChangeContext("digest", "s1"),
                              transform=lambda d: merge_digest(d.content, "asked about Rex's vet", 2000, fmt=d.format))
    await writer.edit(owner, "memory", "append", content="- The caller lives in Oslo.", context=API)
    document = (await other.latest(owner))["memory"]
    assert document.format == "text"
    assert "## " not in document.content and "\nRecent calls:\n- " in document.content
    assert document.content.index("lives in Oslo") < document.content.index("Recent calls:")  # facts on top
    # Forgetting the dog removes the call line about Rex, in the plain-text layout too.
    await writer.edit(owner, "memory", "replace", old_text="- The caller has a dog named Rex.", new_text="",
                      context=API)
    document = (await other.latest(owner))["memory"]
    assert document.format == "text" and "Rex" not in document.content, document.content
