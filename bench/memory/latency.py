"""Caller-memory latency at 10k, 100k and 1M stored memories (PostgreSQL 16 + pgvector, embedded).

    .venv/bin/python -m bench.memory.latency [--scales 10000,100000,1000000] [--samples 500]

For each scale, N memory lines (5 per owner, 256-dimension embeddings) are bulk-loaded with binary COPY
into a fresh embedded PostgreSQL, then measured through the production code paths:
- session-start read from the cache (`runtime.documents`, synchronous) and cold (`prefetch`: pool + SQL);
- a digest write (`provider.apply`: advisory lock, compare-and-set, history, items, commit);
- recall, top-5 cosine over the owner's lines (`provider.query`, including the query's embedding);
- what a hang-up costs the call (`SessionMemory.end` returns before the write starts).
Targets: cache read <= 0.05 ms p99, cold read <= 2 ms p95, recall <= 6 ms p95 at 1M, 0 ms at hang-up.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common.figures import percentiles, progress, save, table
from voicegate.internal.config.providers import MemoryConfig, PgvectorConfig
from voicegate.internal.db import Database, EmbeddedPostgres
from voicegate.internal.memory.adapters import adapt
from voicegate.internal.memory.owner import OwnerKeys
from voicegate.internal.memory.provider import ChangeContext, MemoryChange
from voicegate.internal.memory.providers.pgvector import PgvectorProvider
from voicegate.internal.memory.runtime import DAY_S, FrontendMemoryRuntime
from voicegate.internal.rag.embedding import WordLlamaEmbedder

LINES_PER_OWNER = 5
BATCH = 50_000


async def load(database: Database, memories: int) -> list[str]:
    owners = [f"{i:064x}" for i in range(memories // LINES_PER_OWNER)]
    rng = np.random.default_rng(7)
    async with database.pool.connection() as conn:
        await conn.execute("TRUNCATE memories, memory_items, memory_history, session_digests")
        async with conn.cursor() as cur:
            async with cur.copy("COPY memories (owner_key, scope, content, char_count, revision, expires_at) "
                                "FROM STDIN") as copy:
                for owner in owners:
                    await copy.write_row((owner, "memory", "- fact\n" * LINES_PER_OWNER, 35, 1,
                                          "2999-01-01 00:00:00+00"))
            done = 0
            expires = datetime(2999, 1, 1, tzinfo=UTC)
            while done < memories:
                count = min(BATCH, memories - done)
                vectors = rng.standard_normal((count, 256), dtype=np.float32)
                # Binary COPY: the vectors go as pgvector's binary form, not formatted as text.
                async with cur.copy("COPY memory_items (owner_key, scope, position, text, embedding, expires_at) "
                                    "FROM STDIN WITH (FORMAT BINARY)") as copy:
                    copy.set_types(["text", "text", "int4", "text", "vector", "timestamptz"])
                    for i in range(count):
                        n = done + i
                        await copy.write_row((owners[n // LINES_PER_OWNER], "memory", n % LINES_PER_OWNER,
                                              f"fact number {n}", vectors[i], expires))
                done += count
                progress(f"loading {memories:,} memories", done, memories)
        await conn.execute("ANALYZE memories")
        await conn.execute("ANALYZE memory_items")
    return owners


async def measure_scale(database: Database, embedder: WordLlamaEmbedder, memories: int,
                        samples: int) -> dict[str, dict[str, float]]:
    owners = await load(database, memories)
    provider = PgvectorProvider(database, embedder, 90 * DAY_S)
    runtime = FrontendMemoryRuntime(adapt(provider), MemoryConfig(enabled=True), OwnerKeys(b"bench"))
    picks = [random.Random(n).choice(owners) for n in range(samples)]
    cold, hit, recall, write = [], [], [], []
    for n, owner in enumerate(picks):
        started = time.perf_counter()
        await runtime.prefetch(owner, timeout_s=5)
        cold.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        runtime.documents(owner)
        hit.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        await runtime.query(owner, "what plan is the caller on", 5)
        recall.append((time.perf_counter() - started) * 1000)
        base = runtime.documents(owner)["memory"].revision
        started = time.perf_counter()
        await provider.apply(owner, [MemoryChange("memory", f"- fact\n- digest {n}\n", base)],
                             ChangeContext("digest", retention_s=90 * DAY_S))
        write.append((time.perf_counter() - started) * 1000)
        progress(f"measuring at {memories:,}", n + 1, samples)
    return {"cache_read_ms": percentiles(hit), "cold_read_ms": percentiles(cold),
            "recall_ms": percentiles(recall), "digest_write_ms": percentiles(write)}


async def hangup_cost(database: Database, embedder: WordLlamaEmbedder, samples: int,
                      directory: Path) -> dict[str, float]:
    """Time SessionMemory.end takes on the call path (the write itself lands afterwards, through the
    hang-up outbox: a file fsynced, then the digest merged into the document)."""
    from voicegate.internal.conversation.rolling_summary import RollingSummary
    from voicegate.internal.identity import CallerIdentity
    from voicegate.internal.memory.outbox import HangupOutbox
    from voicegate.internal.memory.sessions import EPOCH, OWNER, SessionMemory
    from voicegate.internal.session import Conversation, Session

    runtime = FrontendMemoryRuntime(adapt(PgvectorProvider(database, embedder, 90 * DAY_S)),
                                    MemoryConfig(enabled=True), OwnerKeys(b"bench"))
    outbox = HangupOutbox(directory / "memory-outbox", retry_max_s=1.0, max_age_s=3600.0, max_entries=10_000)
    memory = SessionMemory(runtime, "Hello", outbox)
    await outbox.start()
    costs, landed = [], []
    for n in range(samples):
        session = Session(CallerIdentity("jwt", f"user{n}"), "talk", Conversation(RollingSummary(None, 5)))
        session.slots.set(OWNER, runtime.owner_key(session.identity))
        session.slots.set(EPOCH, 0)
        session.conversation.transcript.add("user", f"My order number is {n}.")
        started = time.perf_counter()
        await memory.end(session)
        costs.append((time.perf_counter() - started) * 1000)
        await memory.drain(10)
        landed.append((time.perf_counter() - started) * 1000)
    await outbox.stop(10)
    return {"hangup_ms": percentiles(costs), "digest_stored_after_ms": percentiles(landed)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scales", default="10000,100000,1000000")
    parser.add_argument("--samples", type=int, default=500)
    args = parser.parse_args()
    scales = [int(s) for s in args.scales.split(",")]
    with tempfile.TemporaryDirectory(prefix="voicegate-bench-") as directory:
        postgres = EmbeddedPostgres(Path(directory))
        uri = await postgres.start()
        database = Database(PgvectorConfig(connection_string=uri, pool_max=4), Path(directory))
        await database.open()
        embedder = WordLlamaEmbedder()
        results: dict[str, object] = {"samples": args.samples}
        rows = []
        try:
            for scale in scales:
                figures = await measure_scale(database, embedder, scale, args.samples)
                results[str(scale)] = figures
                for name, values in figures.items():
                    rows.append([f"{scale:,}", name, *(f"{v:.3f}" for v in values.values())])
            hangup = await hangup_cost(database, embedder, min(args.samples, 100), Path(directory))
            results["hangup"] = hangup
            for name, values in hangup.items():
                rows.append(["-", name, *(f"{v:.3f}" for v in values.values())])
        finally:
            await database.close()
            await postgres.stop()
    print(table(rows, ["memories", "operation", "p50 ms", "p95 ms", "p99 ms"]))
    print(f"results: {save('memory', results)}")


if __name__ == "__main__":
    asyncio.run(main())
