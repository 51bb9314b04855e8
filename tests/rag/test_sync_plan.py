"""plan_sync: what re-ingesting a source changes, decided from content hashes alone."""

from __future__ import annotations

from voicegate.internal.rag.chunking import Chunk
from voicegate.internal.rag.ingest import StoredChunk, plan_sync


def chunks(*texts: str, embedder: str = "e/1") -> list[Chunk]:
    return [Chunk(i, text, {"embedder": embedder}) for i, text in enumerate(texts)]


def stored(*texts: str, embedder: str = "e/1") -> list[StoredChunk]:
    return [StoredChunk(c.index, c.content_hash, embedder) for c in chunks(*texts)]


def test_the_same_chunks_in_the_same_order_are_identical_and_embed_nothing() -> None:
    plan = plan_sync(stored("a", "b"), chunks("a", "b"))
    assert plan.identical and (plan.added, plan.unchanged, plan.removed) == (0, 2, 0) and plan.to_embed == []


def test_a_new_source_embeds_each_distinct_text_once() -> None:
    plan = plan_sync([], chunks("a", "b", "a"))
    assert not plan.identical and (plan.added, plan.unchanged, plan.removed) == (3, 0, 0)
    assert [c.content for c in plan.to_embed] == ["a", "b"]


def test_moved_chunks_are_rewritten_but_not_re_embedded() -> None:
    plan = plan_sync(stored("a", "b"), chunks("new", "a", "b"))
    assert not plan.identical and (plan.added, plan.unchanged, plan.removed) == (1, 2, 0)
    assert [c.content for c in plan.to_embed] == ["new"]


def test_a_repeated_text_counts_per_occurrence() -> None:
    plan = plan_sync(stored("a", "a", "b"), chunks("a", "b"))
    assert (plan.added, plan.unchanged, plan.removed) == (0, 2, 1) and plan.to_embed == []


def test_chunks_from_another_embedding_model_count_as_new() -> None:
    plan = plan_sync(stored("a", "b", embedder="e/1"), chunks("a", "b", embedder="e/2"))
    assert (plan.added, plan.unchanged, plan.removed) == (2, 0, 2) and len(plan.to_embed) == 2
