"""CallerInput: something that takes the caller's input away from the conversation for a while.

Collecting digits ("enter your account number followed by hash") and detecting an answering machine
both need what the caller does (keys, speech, words, the raw sound) to go somewhere other than the
agent's turns: while a CallerInput holds the pipeline, key presses and final transcripts go to it, no
turn is formed or answered, and the caller's speech does not interrupt the agent (the holder decides
what a barge-in means, e.g. stopping its prompt). The recogniser keeps running, so words still arrive.
The holders live in internal/telephony; the pipeline only routes (pipeline.py `capture`).
"""

from __future__ import annotations

from typing import Protocol


class CallerInput(Protocol):
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
