"""CallerInput: something that takes the caller's input away from the conversation for a while; CallControl:
the port through which a phone flow reaches the call (takes its input, speaks, stops the agent's audio).

Collecting digits ("enter your account number followed by hash") and detecting an answering machine
both need what the caller does (keys, speech, words, the raw sound) to go somewhere other than the
agent's turns: while a CallerInput holds the pipeline, key presses and final transcripts go to it, no
turn is formed or answered, and the caller's speech does not interrupt the agent (the holder decides
what a barge-in means, e.g. stopping its prompt). The recogniser keeps running, so words still arrive.
The holders live in internal/telephony and see the call only as a CallControl (VoicePipeline implements
it); the pipeline only routes (pipeline.py `capture`), and shows the caller's keys and words in the call's
events through `shown`, masked while a holder that keeps them private (a digit form: `private = True`) has
them.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from voicegate.internal.event_envelope import Event, EventSink
from voicegate.internal.pipeline.events import DtmfEvent, TranscriptEvent
from voicegate.internal.stt.base import Transcript

MASKED_WORDS = "[digit entry]"  # what a masked transcript event says instead of the caller's words
E = TypeVar("E", bound=Event)


class CallerInput(Protocol):
    """What the pipeline routes to the input that holds the call (the TurnOwner by default)."""

    def audio(self, pcm: bytes, voiced: bool) -> None:
        """Every inbound 20 ms frame (hot path: bounded, synchronous work only); `voiced`: the VAD's verdict."""

    def speech_started(self, preroll_frames: int) -> bool:
        """The VAD heard the caller start speaking (`preroll_frames` of audio before it kept); True when the
        recogniser should hear this as a new turn (forget the earlier utterances)."""

    def speech_ended(self, final_owed: bool) -> None:
        """The VAD ended an utterance; `final_owed`: its final transcript follows."""

    def transcript(self, transcript: Transcript) -> None:
        """What the recogniser heard (partials too, from streaming engines; superseded finals too)."""

    def finals_lost(self, count: int) -> None:
        """`count` finals the recogniser owed will never come (it died or hung); 0: it was replaced."""

    def digit(self, digit: str) -> None:
        """A key press (RFC 4733 or SIP INFO)."""


class CallControl(Protocol):
    """What a phone flow (a digit form, the answering-machine listener, a phone menu) may do with a call: the
    typed port instead of the pipeline's attributes. VoicePipeline (and the RealtimePipeline) implement it."""

    @property
    def sample_rate(self) -> int: ...

    @property
    def sink(self) -> EventSink:
        """The call's events."""

    @property
    def turn_input(self) -> CallerInput:
        """The input that holds the call when no flow does (the TurnOwner)."""

    def take_input(self, holder: CallerInput) -> CallerInput | None:
        """`holder` takes the caller's input from now on; returns the flow's input it took over (None: the
        turn's), for `hand_back_input`."""

    def hand_back_input(self, holder: CallerInput, to: CallerInput | None) -> None:
        """`holder` is done: the input goes to `to` (None: the turn's), unless another flow has taken it
        since (then that one keeps it)."""

    def clear_playout(self) -> None:
        """Stop the agent's audio now (the rest of a prompt the caller has begun to answer goes unsaid)."""

    async def say(self, text: str) -> None:
        """Speak `text` as the agent (recorded like a reply) and return once it has been played."""

    def announce(self, text: str) -> None:
        """Say `text` as the agent now, without waiting for it."""


def shown(holder: CallerInput | None, event: E) -> E:
    """`event` as the call's events (DataChannel, call feed, logs) show it while `holder` holds the caller's
    input: the keys and words of a holder that keeps them private (`private = True`: a digit form, whose
    entry may be a PIN or a card number) are masked, as DigitsEvent promises (events never carry the
    digits); anything else, and every event when no holder has the call, is shown as it is."""
    if holder is None or getattr(holder, "private", False) is not True:
        return event
    if isinstance(event, DtmfEvent):
        return event.model_copy(update={"digit": "", "masked": True})  # type: ignore[return-value]
    if isinstance(event, TranscriptEvent) and event.role == "user":
        return event.model_copy(update={"text": MASKED_WORDS, "masked": True})  # type: ignore[return-value]
    return event
