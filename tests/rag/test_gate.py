"""The retrieval gate and a call's TurnRetrieval: which turns search, prefetch, bounds, failures."""

from __future__ import annotations

import asyncio

import pytest

from voicegate.internal.config import load_config
from voicegate.internal.rag import RagConfigError, TurnRetrieval, build_retriever, needs_retrieval

# (turn text, retrieves?) — a turn with nothing to anchor a vector search on skips it; when in doubt
# the gate retrieves.
GATE_TABLE = [
    ("okay thanks", False),
    ("Okay, thanks!", False),
    ("yes", False),
    ("yes please", False),
    ("mm-hm", False),
    ("uh-huh", False),
    ("goodbye", False),
    ("bye, have a nice day", False),
    ("thank you so much", False),
    ("no that's all", False),
    ("I don't know", False),
    ("I don\u2019t know", False),  # the typographic apostrophe some recognisers write
    ("hmm let me see", False),
    ("tomorrow at five", False),
    ("the second one", False),
    ("sounds good, great", False),
    ("", False),
    ("   ", False),
    ("12 34", False),
    ("yeah okay 2", False),
    ("when do you open on sunday", True),
    ("what are your opening hours", True),
    ("parking", True),
    ("do you stock BYD", True),
    ("how much is the annual subscription", True),
    ("how much", False),
    ("can I get a refund", True),
    ("order 12345 hasn't arrived", True),
    ("Sam", True),  # a name alone cannot be told from a product or a place: retrieve
    ("café", True),
]


@pytest.mark.parametrize(("text", "retrieves"), GATE_TABLE)
def test_turns_without_content_words_skip_retrieval(text: str, retrieves: bool) -> None:
    assert needs_retrieval(text) is retrieves


class ScriptedRetriever:
    def __init__(self, delay_s: float = 0.0, fail: bool = False) -> None:
        self.queries: list[tuple[str, int]] = []
        self.delay_s = delay_s
        self.fail = fail
        self.cancelled = 0

    async def retrieve(self, text: str, top_k: int) -> list[str]:
        self.queries.append((text, top_k))
        try:
            await asyncio.sleep(self.delay_s)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if self.fail:
            raise RuntimeError("backend exploded")
        return [f"chunk for {text}"]

    async def aclose(self) -> None:
        pass


async def test_a_skipped_turn_never_reaches_the_retriever() -> None:
    retriever = ScriptedRetriever()
    turns = TurnRetrieval(retriever, top_k=3)
    assert await turns.for_turn("okay thanks") == []
    turns.prefetch("mm-hm")
    assert await turns.for_turn("mm-hm") == []
    assert retriever.queries == []


async def test_a_turn_retrieves_with_the_configured_top_k() -> None:
    retriever = ScriptedRetriever()
    assert await TurnRetrieval(retriever, top_k=4).for_turn("  where can I park  ") == ["chunk for where can I park"]
    assert retriever.queries == [("where can I park", 4)]


async def test_a_prefetch_for_the_same_text_is_used_once() -> None:
    retriever = ScriptedRetriever(delay_s=0.05)
    turns = TurnRetrieval(retriever, top_k=3)
    turns.prefetch("when do you open")
    turns.prefetch("when do you open")  # the same pending text again: still one search
    assert await turns.for_turn("when do you open") == ["chunk for when do you open"]
    assert retriever.queries == [("when do you open", 3)]
    assert await turns.for_turn("when do you open") == ["chunk for when do you open"]
    assert len(retriever.queries) == 2  # the prefetch was taken, the next turn searches afresh


async def test_a_prefetch_overtaken_by_a_merged_final_is_cancelled_and_the_turn_searches_again() -> None:
    retriever = ScriptedRetriever(delay_s=5.0)
    turns = TurnRetrieval(retriever, top_k=3)
    turns.prefetch("I want to book")
    await asyncio.sleep(0.01)
    retriever.delay_s = 0.0
    assert await turns.for_turn("I want to book parking") == ["chunk for I want to book parking"]
    await asyncio.sleep(0.01)
    assert retriever.cancelled == 1
    assert [q for q, _ in retriever.queries] == ["I want to book", "I want to book parking"]


async def test_hang_up_cancels_a_prefetch_nobody_takes() -> None:
    retriever = ScriptedRetriever(delay_s=5.0)
    turns = TurnRetrieval(retriever, top_k=3)
    turns.prefetch("refund policy")
    await asyncio.sleep(0.01)
    await turns.aclose()
    assert retriever.cancelled == 1


async def test_a_slow_or_failing_retriever_gives_an_empty_result_not_an_error() -> None:
    assert await TurnRetrieval(ScriptedRetriever(delay_s=5.0), 3, timeout_s=0.05).for_turn("parking") == []
    assert await TurnRetrieval(ScriptedRetriever(fail=True), 3).for_turn("parking") == []


def test_no_provider_means_no_retriever_and_a_broken_one_says_what_to_set() -> None:
    config = load_config(None)
    assert build_retriever(config, None) is None
    config.rag.provider = "pgvector"
    with pytest.raises(RagConfigError, match="database"):
        build_retriever(config, None)
    config.rag.provider = "supabase"
    with pytest.raises(RagConfigError, match=r"\[supabase\] url"):
        build_retriever(config, None)
