"""What the offline agent recalls: the caller's facts, never the digest of past calls under its heading."""

from __future__ import annotations

from voicegate.internal.conversation.past_calls import DIGEST_HEADING
from voicegate.internal.llm.local import memory_lines

DOCUMENT = ("- I like green tea.\n- 2019 was the year I moved to Lisbon.\n\n"
            f"{DIGEST_HEADING}\n- 2026-12-01: the caller said \"what time is it\"\n")


def read_result(content: str) -> dict[str, object]:
    return {"documents": {"memory": {"content": content}, "user": {"content": "- Keep answers short."}}}


def test_recall_lists_the_facts_even_one_that_starts_with_a_year_and_not_the_call_digest() -> None:
    assert memory_lines(read_result(DOCUMENT), facts_only=True) == [
        "- I like green tea.", "- 2019 was the year I moved to Lisbon.", "- Keep answers short."]


def test_every_line_is_there_for_finding_what_to_forget() -> None:
    assert "- 2026-12-01: the caller said \"what time is it\"" in memory_lines(read_result(DOCUMENT))
