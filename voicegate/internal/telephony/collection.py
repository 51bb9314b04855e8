"""Running a digit form on a live call: prompt, listen for keys and words, judge, re-prompt, give up.

While the form runs it holds the pipeline's caller input (internal/pipeline/capture.py): keys and the
recogniser's finals come here, not to the agent's turns, and talking over the prompt does not cancel
the reply that asked for the digits. A key or the first words during the prompt stop the prompt at
once (a caller who knows the number need not hear the instructions out). Each attempt follows the
rules in digits.py; a failed one is followed by the retry prompt and the prompt again, up to
`max_attempts`.

A form can end while the recogniser still owes it words: the caller read the number out and keyed it too,
and the keys finished first; or was still talking when the last digit came. Those words are the form's
(a PIN, a card), so they must not come out as the next turn, shown in clear, answered by the model. Until
they are in, a `Leftovers` holds the call's input: it takes the words owed, masked like the form's own,
and passes everything the caller does afterwards on to the input the form took over. The first utterance
after the form starts a new turn for the recogniser, so a whole-turn decode (Whisper) never hears it
together with the form's words.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from voicegate.internal.event_envelope import EventSink
from voicegate.internal.pipeline.capture import CallControl, CallerInput
from voicegate.internal.stt.base import Transcript
from voicegate.internal.telephony.digits import AttemptResult, DigitEntry, DigitSpec, Via, next_prompt
from voicegate.internal.telephony.events import DigitsEvent

NOT_STARTED_MS = 1 << 62  # an attempt's timers start when its prompt has been heard

Speak = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class DigitsResult:
    status: Literal["complete", "invalid", "timeout"]  # of the last attempt
    digits: str
    via: Via
    attempts: int

    @property
    def ok(self) -> bool:
        return self.status == "complete"


class DigitCollection:
    """The CallerInput of one form: feeds the current attempt and wakes the collector."""

    private = True  # the entry may be a PIN or a card number: masked in the call's events

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._epoch = clock()
        self.entry: DigitEntry | None = None
        self.changed = asyncio.Event()
        self.speaking = False  # the caller is saying something the form heard begin
        self.owed = 0  # finals the recogniser owes for utterances the form heard end

    def now_ms(self) -> int:
        return int((self._clock() - self._epoch) * 1000)

    def audio(self, pcm: bytes, voiced: bool) -> None:
        return None

    def speech_started(self, preroll_frames: int) -> bool:
        self.speaking = True
        if self.entry is not None:
            self.entry.speech_started(self.now_ms())
            self.changed.set()
        return True  # each utterance is heard on its own

    def speech_ended(self, final_owed: bool) -> None:
        self.speaking = False
        self.owed += final_owed

    def transcript(self, transcript: Transcript) -> None:
        if transcript.final:
            self.owed = max(0, self.owed - 1)
        if transcript.final and not transcript.superseded and self.entry is not None:
            self.entry.speech(transcript.text.strip(), self.now_ms())
            self.changed.set()

    def finals_lost(self, count: int) -> None:
        self.owed = max(0, self.owed - count)
        if count and self.entry is not None:  # the words will not come: the attempt stops waiting for them
            self.entry.speech("", self.now_ms())
            self.changed.set()

    def digit(self, digit: str) -> None:
        if self.entry is not None:
            self.entry.key(digit, self.now_ms())
            self.changed.set()


async def collect_digits(pipeline: CallControl, spec: DigitSpec, speak: Speak, *, form: str = "",
                         sink: EventSink | None = None) -> DigitsResult:
    """Run the form on the call; the last attempt's outcome. `speak` says a prompt in the agent's voice and
    returns once it has been played (ToolContext.speak)."""
    capture = DigitCollection()
    previous = pipeline.take_input(capture)
    attempt, last = 0, None
    try:
        while (prompt := next_prompt(spec, attempt + 1, last)) is not None:
            attempt += 1
            last = await _attempt(pipeline, capture, spec, prompt, speak)
            if last.status == "complete":
                break
    finally:
        # Words of the form's still to come (module doc) are taken by Leftovers.
        owed = capture.speaking or capture.owed
        pipeline.hand_back_input(capture, Leftovers(pipeline, previous, capture.speaking, capture.owed) if owed
                                 else previous)
    assert last is not None
    result = DigitsResult(last.status, last.digits if last.status == "complete" else "", last.via, attempt)
    (sink or pipeline.sink).emit(DigitsEvent(form=form, status=result.status, via=result.via,
                                             length=len(result.digits), attempts=attempt))
    return result


async def _attempt(pipeline: CallControl, capture: DigitCollection, spec: DigitSpec, prompt: str,
                   speak: Speak) -> AttemptResult:
    entry = DigitEntry(spec, NOT_STARTED_MS)
    capture.entry = entry
    capture.changed.clear()
    prompting: asyncio.Future[None] = asyncio.ensure_future(speak(prompt))
    try:
        while not prompting.done() and not entry.begun and entry.result is None:
            waiter: asyncio.Future[None] = asyncio.ensure_future(_changed(capture))
            await asyncio.wait([prompting, waiter], return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            capture.changed.clear()
        if not prompting.done():
            pipeline.clear_playout()  # the caller has begun: the rest of the prompt goes unsaid
        entry.started_ms = capture.now_ms()
        while entry.result is None:
            deadline = entry.deadline_ms()
            timeout = None if deadline is None else max(0.0, (deadline - capture.now_ms()) / 1000)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(capture.changed.wait(), timeout)
            capture.changed.clear()
            entry.expire(capture.now_ms())
        return entry.result
    finally:
        capture.entry = None
        if not prompting.done():
            prompting.cancel()
        await asyncio.gather(prompting, return_exceptions=True)


async def _changed(capture: DigitCollection) -> None:
    await capture.changed.wait()


class Leftovers:
    """The CallerInput between a form's end and the last words the recogniser owed it (module doc): those
    are taken and dropped, masked in the call's events (`private`); the rest goes to `previous` (the input
    the form took over, the TurnOwner when none). Finals come in the order the caller spoke, so the first
    `owed` are the form's; an utterance under way when the form ended is the form's too."""

    private = True

    def __init__(self, pipeline: CallControl, previous: CallerInput | None, speaking: bool, owed: int) -> None:
        self._pipeline = pipeline
        self._previous = previous
        self.speaking = speaking  # the caller is still saying what the form heard begin
        self.owed = owed

    @property
    def previous(self) -> CallerInput:
        return self._previous if self._previous is not None else self._pipeline.turn_input

    def _done(self) -> None:
        if not self.speaking and not self.owed:
            self._pipeline.hand_back_input(self, self._previous)

    def audio(self, pcm: bytes, voiced: bool) -> None:
        if not self.speaking:
            self.previous.audio(pcm, voiced)

    def speech_started(self, preroll_frames: int) -> bool:
        self.speaking = False
        self.previous.speech_started(preroll_frames)
        return True  # never heard together with the form's words, whatever the turn it belongs to

    def speech_ended(self, final_owed: bool) -> None:
        if self.speaking:  # the form's utterance: its words are owed here
            self.speaking = False
            self.owed += final_owed
            self._done()
        else:
            self.previous.speech_ended(final_owed)

    def transcript(self, transcript: Transcript) -> None:
        if self.owed and transcript.final:
            self.owed -= 1
            self._done()
        elif not self.owed and not self.speaking:
            self.previous.transcript(transcript)
        # else a partial of the form's words: dropped

    def finals_lost(self, count: int) -> None:
        mine = min(count, self.owed)
        self.owed -= mine
        if count > mine:
            self.previous.finals_lost(count - mine)
        self._done()

    def digit(self, digit: str) -> None:
        self.previous.digit(digit)
