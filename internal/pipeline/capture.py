"""CallerInput: something that takes the caller's input away from the conversation for a while.

Collecting digits ("enter your account number followed by hash") and detecting an answering machine
both need what the caller does (keys, speech, words, the raw sound) to go somewhere other than the
agent's turns: while a CallerInput holds the pipeline, key presses and final transcripts go to it, no
turn is formed or answered, and the caller's speech does not interrupt the agent (the holder decides
what a barge-in means, e.g. stopping its prompt). The recogniser keeps running, so words still arrive.
The holders live in internal/telephony; the pipeline only routes (pipeline.py `capture`), and shows the
caller's keys and words in the call's events through `shown`, masked while a private holder (a digit
form) has them.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from internal.pipeline.events import DtmfEvent, Event, TranscriptEvent

MASKED_WORDS = "[digit entry]"  # what a masked transcript event says instead of the caller's words
E = TypeVar("E", bound=Event)


class CallerInput(Protocol):
    # The caller's keys and words while this holds are nobody's business but its own (a digit form: a
    # PIN, a card number): the call's events show that a key was pressed or words were said, not which.
    private: bool

    def audio(self, pcm: bytes) -> None:
        """Every inbound 20 ms frame (hot path: bounded, synchronous work only)."""

    def speech_started(self) -> None:
        """The VAD heard the caller start speaking."""

    def speech_ended(self) -> None:
        """The VAD ended an utterance; its final transcript follows (when there is a recogniser)."""

    def transcript(self, text: str, final: bool) -> None:
        """What the recogniser heard (partials too, from streaming engines)."""

    def digit(self, digit: str) -> None:
        """A key press (RFC 4733 or SIP INFO)."""


def shown(holder: CallerInput | None, event: E) -> E:
    """`event` as the call's events (DataChannel, call feed, logs) show it while `holder` holds the caller's
    input: a private holder's keys and the caller's words are masked, as DigitsEvent promises (events
    never carry the digits); anything else, and every event when nothing holds, is shown as it is."""
    if holder is None or not holder.private:
        return event
    if isinstance(event, DtmfEvent):
        return event.model_copy(update={"digit": "", "masked": True})  # type: ignore[return-value]
    if isinstance(event, TranscriptEvent) and event.role == "user":
        return event.model_copy(update={"text": MASKED_WORDS, "masked": True})  # type: ignore[return-value]
    return event
