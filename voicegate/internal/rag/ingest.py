"""Ingestion: files cut into chunks, embedded, and written so that the store mirrors each file.

A source (a file's absolute path) is synced as a whole: its stored chunks become exactly the chunks of
the file now. Comparing content hashes makes that cheap and idempotent: an unchanged file writes
nothing, and a changed file re-embeds only chunks whose text is new (the embeddings of the rest are
reused, which matters when every embedding is a paid API call). Each chunk records the embedding model
in its metadata (`embedder`); a chunk embedded by another model counts as new, so switching
`[rag] embedding` and re-ingesting re-embeds everything.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Protocol

from voicegate.internal.rag.chunking import Chunk, DocumentError, chunk_file
from voicegate.internal.rag.embedding import Embedder, EmbeddingError, Vector, embedder_identity

# Texts per embedding request: big enough to amortise a round trip, small enough that the progress bar
# moves and one failed request loses little.
EMBED_BATCH = 64

Progress = Callable[[int, int], None]  # (chunks done, chunks in all)
EmbedFn = Callable[[list[str]], Awaitable[list[Vector]]]


class KnowledgeStoreError(Exception):
    """The store refused or could not be reached; the message says what to fix."""


ChunkKey = tuple[str, str]  # (content hash, embedder): equal keys, interchangeable vectors


def chunk_key(chunk: Chunk) -> ChunkKey:
    return chunk.content_hash, chunk.metadata.get("embedder", "")


@dataclass(frozen=True)
class StoredChunk:
    index: int
    content_hash: str
    embedder: str = ""

    @property
    def key(self) -> ChunkKey:
        return self.content_hash, self.embedder


@dataclass(frozen=True)
class SyncPlan:
    identical: bool  # the store already holds exactly these chunks, in this order: write nothing
    added: int  # chunks whose text the source did not have
    unchanged: int  # chunks whose text it had (their embeddings are reused)
    removed: int  # stored chunks whose text is gone
    to_embed: list[Chunk]  # one chunk per new key


@dataclass(frozen=True)
class SyncResult:
    source: str
    added: int
    unchanged: int
    removed: int

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed)


@dataclass(frozen=True)
class SourceSummary:
    source: str
    chunks: int
    ingested_at: datetime | None
    embedders: str = ""  # the embedding models of its chunks; one, unless a re-ingest is overdue


class KnowledgeStore(Protocol):
    """Where chunks live (pgvector table, Supabase table); what ingestion and `voicegate rag` use."""

    async def sync(self, source: str, chunks: Sequence[Chunk], embed: EmbedFn) -> SyncResult:
        """Make the stored chunks of `source` exactly `chunks`; embed only texts not stored yet."""
        ...

    async def sources(self) -> list[SourceSummary]: ...

    async def delete(self, source: str) -> int:
        """Remove every chunk of `source`; return how many there were."""
        ...

    async def aclose(self) -> None: ...


def plan_sync(stored: Sequence[StoredChunk], chunks: Sequence[Chunk]) -> SyncPlan:
    """What syncing `chunks` over `stored` changes. Counted per chunk, so a repeated row counts twice."""
    old = Counter(item.key for item in stored)
    new = Counter(chunk_key(chunk) for chunk in chunks)
    identical = ([(s.index, s.key) for s in sorted(stored, key=lambda s: s.index)]
                 == [(c.index, chunk_key(c)) for c in chunks])
    added = sum((new - old).values())
    removed = sum((old - new).values())
    to_embed: dict[ChunkKey, Chunk] = {}
    for chunk in chunks:
        if chunk_key(chunk) not in old:
            to_embed.setdefault(chunk_key(chunk), chunk)
    return SyncPlan(identical, added, len(chunks) - added, removed, list(to_embed.values()))


async def embed_missing(plan: SyncPlan, known: Mapping[ChunkKey, Vector], embed: EmbedFn) -> dict[ChunkKey, Vector]:
    """Every chunk's vector by key: the stored ones, plus the plan's new texts embedded."""
    vectors = dict(known)
    new_texts = [chunk.content for chunk in plan.to_embed]
    fresh = await embed(new_texts) if new_texts else []
    if len(fresh) != len(new_texts):
        raise KnowledgeStoreError(f"the embedder returned {len(fresh)} vectors for {len(new_texts)} texts")
    for chunk, vector in zip(plan.to_embed, fresh, strict=True):
        vectors[chunk_key(chunk)] = vector
    return vectors


def source_name(path: Path) -> str:
    """The source a file is stored under: its absolute path, so it is the same from any directory."""
    return str(path.expanduser().resolve())


@dataclass
class IngestReport:
    results: list[SyncResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # one message per file that was not ingested

    @property
    def added(self) -> int:
        return sum(r.added for r in self.results)

    @property
    def unchanged(self) -> int:
        return sum(r.unchanged for r in self.results)

    @property
    def removed(self) -> int:
        return sum(r.removed for r in self.results)

    def summary(self) -> str:
        line = (f"{len(self.results)} file(s) ingested: {self.added} chunk(s) added, "
                f"{self.unchanged} unchanged, {self.removed} removed")
        return line + (f"; {len(self.skipped)} file(s) skipped" if self.skipped else "")


async def ingest_chunks(store: KnowledgeStore, embedder: Embedder, source: str, chunks: Sequence[Chunk],
                        on_embedded: Callable[[int], None] | None = None) -> SyncResult:
    """Sync one source's chunks into the store; `on_embedded(n)` after each batch of n new embeddings."""
    identity = embedder_identity(embedder)
    tagged = [replace(chunk, metadata={**chunk.metadata, "embedder": identity}) for chunk in chunks]

    async def embed(texts: list[str]) -> list[Vector]:
        vectors: list[Vector] = []
        for start in range(0, len(texts), EMBED_BATCH):
            batch = texts[start : start + EMBED_BATCH]
            try:
                vectors += await embedder.embed(batch)
            except EmbeddingError as exc:
                raise KnowledgeStoreError(f"embedding failed: {exc}") from None
            if on_embedded is not None:
                on_embedded(len(batch))
        return vectors

    return await store.sync(source, tagged, embed)


async def ingest_files(store: KnowledgeStore, embedder: Embedder, paths: Sequence[Path], chunk_size: int,
                       chunk_overlap: int, progress: Progress | None = None) -> IngestReport:
    """Ingest each readable file; an unreadable or unsupported one is reported in `skipped`, not fatal.

    KnowledgeStoreError (store unreachable, table missing, embedding failed) stops the run: the files
    before it are ingested, the rest untouched, and a re-run picks up where it stopped.
    """
    report = IngestReport()
    documents: dict[str, list[Chunk]] = {}
    for path in paths:
        try:
            chunks = chunk_file(path, chunk_size, chunk_overlap)
        except DocumentError as exc:
            report.skipped.append(str(exc))
            continue
        documents.setdefault(source_name(path), chunks)
    total = sum(len(chunks) for chunks in documents.values())
    done = 0

    def advance(count: int) -> None:
        nonlocal done
        done = min(total, done + count)
        if progress is not None:
            progress(done, total)

    if progress is not None:
        progress(0, total)
    for source, chunks in documents.items():
        before = done
        result = await ingest_chunks(store, embedder, source, chunks, on_embedded=advance)
        advance(before + len(chunks) - done)  # chunks that needed no embedding count as done too
        report.results.append(result)
    return report

