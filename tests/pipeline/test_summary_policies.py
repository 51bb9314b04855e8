"""Pure policy functions the pipeline applies: when the rolling summary is refreshed and what it holds, and
the note a low-confidence transcript adds to the request."""

from __future__ import annotations

import pytest

from voicegate.internal.conversation.rolling_summary import (
    SUMMARY_MAX_INPUT_CHARS,
    extractive_summary,
    format_transcript_for_summary,
    should_refresh_summary,
    summary_context_block,
)
from voicegate.internal.conversation.transcript import TranscriptEntry
from voicegate.internal.pipeline.services import misunderstanding_note


@pytest.mark.parametrize(
    ("entries", "last_at", "generating", "have", "expected"),
    [
        (10, 0, False, False, False),  # too short to need one
        (23, 0, False, False, False),
        (24, 0, False, False, True),  # activates at 24 entries
        (30, 24, False, True, False),  # fresh enough
        (36, 24, False, True, True),  # 12 new entries: refresh
        (60, 24, True, True, False),  # never two at once
    ],
)
def test_should_refresh_summary(entries: int, last_at: int, generating: bool, have: bool, expected: bool) -> None:
    assert should_refresh_summary(entries, last_at, generating, have) is expected


def entry(role: str, text: str) -> TranscriptEntry:
    return TranscriptEntry(role, text, 0.0)  # type: ignore[arg-type]


def test_summary_input_is_a_bounded_script_of_the_most_recent_text() -> None:
    entries = [entry("user" if i % 2 == 0 else "agent", f"line {i} " + "x" * 100) for i in range(200)]
    script = format_transcript_for_summary(entries)
    assert len(script) <= SUMMARY_MAX_INPUT_CHARS
    assert script.rstrip().endswith("line 199 " + "x" * 100)
    assert "Caller: " in script and "Agent: " in script
    assert format_transcript_for_summary([entry("user", "  ")]) == ""


def test_summary_block_is_empty_without_a_summary() -> None:
    assert summary_context_block("  ") == ""
    assert "Name: Sam" in summary_context_block("Name: Sam")


def test_extractive_summary_keeps_the_callers_facts_within_budget() -> None:
    entries = [entry("agent", "Hello, how can I help?"), entry("user", "My name is Sam."),
               entry("user", "Nice weather."), entry("user", "I want to book a table for 4 on Friday.")]
    summary = extractive_summary(entries)
    assert "My name is Sam." in summary and "book a table for 4" in summary
    assert "Nice weather" not in summary
    many = [entry("user", f"My order number is {i}.") for i in range(500)]
    assert len(extractive_summary(many, max_chars=300)) <= 300
    assert "499" in extractive_summary(many, max_chars=300)


def test_low_confidence_escalates_and_a_clear_turn_resets() -> None:
    streak, note = misunderstanding_note(0.2, 0.5, 0)
    assert streak == 1 and "clarify" in note
    streak, note = misunderstanding_note(0.2, 0.5, streak)
    assert streak == 2 and "Do not ask them to repeat again" in note
    streak, note = misunderstanding_note(0.1, 0.5, streak)
    assert streak == 3 and "another way" in note
    assert misunderstanding_note(0.9, 0.5, streak) == (0, "")
    assert misunderstanding_note(None, 0.5, 2) == (0, "")  # unknown confidence is never "low"
    assert misunderstanding_note(0.1, 0.0, 2) == (0, "")  # feature off
