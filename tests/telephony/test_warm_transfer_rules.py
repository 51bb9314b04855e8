"""Warm transfer's rules: what the target is told, when, and what the caller hears when it fails."""

from __future__ import annotations

from voicegate.internal.conversation.transcript import TranscriptLog
from voicegate.internal.telephony.warm_transfer import (
    GREETING_PAUSE_MS,
    briefing,
    call_summary,
    greeting_over,
    return_message,
    shorten,
    why_not,
)

TEMPLATE = "Hello, this is the voice assistant with a caller for {target}. {summary} I'm connecting you now."


def transcript(*lines: tuple[str, str]) -> TranscriptLog:
    log = TranscriptLog()
    for role, text in lines:
        log.add(role, text)  # type: ignore[arg-type]
    return log


def test_the_rolling_summary_is_the_briefing_when_there_is_one() -> None:
    entries = transcript(("user", "hi"), ("agent", "Hello!")).entries()
    summary = call_summary("- Sam wants a refund for order 123.\n- He is on the pro plan.", entries, 300)
    assert summary == "Sam wants a refund for order 123. He is on the pro plan."
    assert briefing(TEMPLATE, "sales", summary) == (
        "Hello, this is the voice assistant with a caller for sales. Sam wants a refund for order 123. He is on "
        "the pro plan. I'm connecting you now.")


def test_a_short_call_is_summed_up_from_the_callers_own_words() -> None:
    entries = transcript(("user", "my name is Sam"), ("agent", "Nice to meet you."),
                         ("user", "I want to cancel my order"), ("agent", "Okay."),
                         ("user", "transfer me to sales")).entries()
    assert call_summary("", entries, 300) == "The caller said: my name is Sam. I want to cancel my order."
    chatty = transcript(("user", "hello there"), ("user", "transfer me to sales")).entries()
    assert call_summary("", chatty, 300) == "The caller said: hello there. transfer me to sales."
    assert call_summary("", [], 300) == ""
    assert briefing(TEMPLATE, "sales", "") == ("Hello, this is the voice assistant with a caller for sales. "
                                               "I'm connecting you now.")


def test_a_long_summary_is_cut_at_a_sentence_or_a_word() -> None:
    text = "Sam wants a refund. " * 30
    cut = shorten(text.strip(), 100)
    assert len(cut) <= 100 and cut.endswith("refund.")
    assert shorten("word " * 50, 42).endswith(".") and len(shorten("word " * 50, 42)) <= 43


def test_the_briefing_waits_for_the_targets_hello_to_end_but_not_forever() -> None:
    assert not greeting_over(None, None, 1000, 2500)  # nothing said yet: wait
    assert not greeting_over(300, 900, 900 + GREETING_PAUSE_MS - 20, 2500)  # still in their "hello"
    assert greeting_over(300, 900, 900 + GREETING_PAUSE_MS, 2500)
    assert greeting_over(None, None, 2500, 2500)  # a silent target hears us anyway


def test_why_the_target_did_not_take_the_call() -> None:
    assert why_not(486) == "is busy right now"
    assert why_not(603) == "can't take the call right now"
    assert why_not(408) == why_not(480) == "didn't answer"
    assert why_not(0) == "had to hang up"
    assert why_not(404) == "couldn't be reached"
    assert return_message("Sorry, {target} {why}. I'm still here.", "sales", 486) == (
        "Sorry, sales is busy right now. I'm still here.")
