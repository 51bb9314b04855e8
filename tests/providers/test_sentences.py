"""Cutting a streamed reply into sentences for speech, only where a boundary is certain."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicegate.internal.llm.sentences import SentenceChunker


def chunk_all(text: str, step: int = 0) -> list[str]:
    chunker = SentenceChunker()
    out: list[str] = []
    pieces = [text] if step <= 0 else [text[i : i + step] for i in range(0, len(text), step)]
    for piece in pieces:
        out += chunker.push(piece)
    return out + chunker.flush()


@pytest.mark.parametrize(
    ("text", "chunks"),
    [
        ("Hello there. How are you?", ["Hello there.", "How are you?"]),
        ("Great! Really? Yes; indeed.", ["Great!", "Really?", "Yes;", "indeed."]),
        ("It costs 3.14 dollars. Fine.", ["It costs 3.14 dollars.", "Fine."]),
        ("Write to me@example.com. Thanks.", ["Write to me@example.com.", "Thanks."]),
        ("Mr. Smith and Dr. Jones are in. Bye.", ["Mr. Smith and Dr. Jones are in.", "Bye."]),
        ("Fruit, e.g. apples, i.e. food. Ok.", ["Fruit, e.g. apples,", "i.e. food.", "Ok."]),
        ("J. R. R. Tolkien wrote it. Yes.", ["J. R. R. Tolkien wrote it.", "Yes."]),
        ("Well... maybe later. Wait... What?", ["Well... maybe later.", "Wait...", "What?"]),
        ("He said \"stop.\" Then left.", ["He said \"stop.\"", "Then left."]),
        ("Really?! Wow.", ["Really?!", "Wow."]),
        ("Options:\n1. Tea\n2. Coffee", ["Options:", "1. Tea", "2. Coffee"]),
        ("I have 3. You have 4.", ["I have 3.", "You have 4."]),
        ("no ending at all", ["no ending at all"]),
        ("", []),
    ],
)
def test_boundaries(text: str, chunks: list[str]) -> None:
    assert chunk_all(text) == chunks
    assert chunk_all(text, step=1) == chunks


def test_a_sentence_is_released_as_soon_as_the_next_character_proves_it_ended() -> None:
    chunker = SentenceChunker()
    assert chunker.push("Sure.") == []  # "Sure.com"? not yet certain
    assert chunker.push(" ") == ["Sure."]
    assert chunker.push("Next") == []
    assert chunker.flush() == ["Next"]


def test_first_long_clause_is_cut_early_at_a_comma() -> None:
    chunker = SentenceChunker()
    opening = "Thanks for calling the downtown branch today, "
    assert chunker.push(opening + "we are open") == [opening.strip()]
    # Only the first chunk gets the early cut; later commas wait for the sentence end.
    assert chunker.push(" until nine tonight, and all of tomorrow, of course. Bye") == [
        "we are open until nine tonight, and all of tomorrow, of course."
    ]


def test_a_greeting_that_opens_the_reply_is_synthesised_on_its_own() -> None:
    """The first audio waits for the first chunk's synthesis: a short opening clause is heard sooner."""
    assert chunk_all("Good afternoon, how can I help you today?") == ["Good afternoon,", "how can I help you today?"]


LONG_OPENING = ("I have looked up your account and I can see that the payment you made last Tuesday has not "
                "been applied to your balance yet.")


@pytest.mark.parametrize(("text", "chunks"), [
    # A long opening sentence without a comma: its first clause is rendered, and heard, on its own.
    (LONG_OPENING + " Shall I fix it?",
     ["I have looked up your account", LONG_OPENING.removeprefix("I have looked up your account "),
      "Shall I fix it?"]),
    ("Your appointment has been moved to Thursday because the doctor is away at a conference that week.",
     ["Your appointment has been moved to Thursday", "because the doctor is away at a conference that week."]),
    ("The parcel left our warehouse this morning but it's held at customs until the papers arrive.",
     ["The parcel left our warehouse this morning", "but it's held at customs until the papers arrive."]),
    # "and" joining two nouns is no clause: said whole.
    ("I would like to order the salt and pepper grinder from your catalogue today please.",
     ["I would like to order the salt and pepper grinder from your catalogue today please."]),
    # The sentence ends soon after: the cut would save little, so it is said whole.
    ("I checked your account and it is fine. Bye.", ["I checked your account and it is fine.", "Bye."]),
    # Too little before the conjunction.
    ("Yes and I can see that the payment you made last Tuesday has not been applied.",
     ["Yes and I can see that the payment you made last Tuesday has not been applied."]),
    # Only the first chunk: later sentences are rendered while the first plays.
    ("Sure. " + LONG_OPENING, ["Sure.", LONG_OPENING]),
])
def test_a_long_opening_sentence_without_a_comma_is_cut_before_a_clause(text: str, chunks: list[str]) -> None:
    for step in (0, 1, 5):
        assert chunk_all(text, step) == chunks


def test_short_first_clause_is_not_cut_at_its_comma() -> None:
    assert chunk_all("Yes, of course. Anything else?") == ["Yes, of course.", "Anything else?"]


def test_run_on_text_without_stops_is_cut_at_a_comma_once_long() -> None:
    clause = "and then " + "more " * 50
    text = "Start here. " + ", ".join([clause] * 3)
    chunks = chunk_all(text)
    assert len(chunks) >= 3 and all(len(c) < 400 for c in chunks)


def test_flush_resets_for_the_next_reply() -> None:
    chunker = SentenceChunker()
    chunker.push("Half a sen")
    assert chunker.flush() == ["Half a sen"]
    assert chunker.flush() == []
    assert chunker.push("Thanks for calling the downtown branch today, ok") == [
        "Thanks for calling the downtown branch today,"
    ]


_ALPHABET = st.sampled_from([*"abc XYZ019.,!?;:…'\"\n\t()", "Mr.", "e.g.", "3.14", "...", " Dr. "])
texts = st.lists(_ALPHABET, max_size=80).map("".join)


def squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


@given(texts, st.lists(st.integers(min_value=1, max_value=7), min_size=1, max_size=40))
def test_chunks_concatenate_to_the_input_modulo_whitespace(text: str, cuts: list[int]) -> None:
    chunker = SentenceChunker()
    out: list[str] = []
    pos, i = 0, 0
    while pos < len(text):
        step = cuts[i % len(cuts)]
        out += chunker.push(text[pos : pos + step])
        pos, i = pos + step, i + 1
    out += chunker.flush()
    assert squash("".join(out)) == squash(text)
    assert all(chunk and chunk == chunk.strip() for chunk in out)


@given(texts, st.integers(min_value=1, max_value=9))
def test_chunking_does_not_depend_on_how_the_text_was_split(text: str, step: int) -> None:
    assert chunk_all(text, step) == chunk_all(text)
