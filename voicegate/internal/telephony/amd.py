"""Answering-machine detection: who picked up an outbound call, a person or a machine, from the first seconds.

A person answers with a short greeting ("Hello?", "This is Sam") and then waits for us to speak; a
voicemail greeting goes on ("Hi, you've reached Sam, I can't take your call right now, please leave a
message after the tone") and often ends in a beep. So the classifier follows the greeting's *shape*
(when speech starts, how long it runs, whether a silence follows it), listens for a beep
(beep.py), and reads the recogniser's words when there are any ("leave a message" settles it; "how can I
help" speaks for a person whose greeting was long). Nobody speaking at all is *unknown*: a person who
says nothing and a machine with an empty greeting sound the same.

`classify` is the whole policy, a pure function of what has been heard so far (`Heard`); the
`AnsweringMachineClassifier` only keeps `Heard` up to date frame by frame. The thresholds are tuned
on bench/sip/amd.py's training answers and checked on its held-out ones (docs/performance.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

from voicegate.internal.audio.frame import FRAME_MS
from voicegate.internal.telephony.beep import Beep, BeepDetector
from voicegate.internal.turn.vad import AdaptiveEnergyClassifier

AmdResult = Literal["human", "machine", "unknown"]
AmdReason = Literal["beep", "words", "long greeting", "short greeting", "silence", "undecided"]

# Louder than the line's own noise floor by this much is speech (the pipeline's energy VAD default).
SPEECH_OVER_FLOOR_DB = 9.0
# A run of this many voiced frames is speech; shorter ones (a click, a breath) are not.
SPEECH_RUN_FRAMES = 3

# Phrases only a recording says. Matched on the lower-cased transcript without punctuation.
_MACHINE_WORDS = re.compile(
    r"\b(leave (?:a|your|me a|us a) (?:message|name|brief message)|after the (?:tone|beep)|at the (?:tone|beep)|"
    r"not available|unavailable|voice ?mail|mailbox|you(?:'ve| have) reached|record your message|"
    r"can(?:'t|not) (?:take|come to|get to|answer)|get back to you|call you back|away from (?:the|my) (?:phone|desk)|"
    r"missed your call|please leave|the number you (?:have )?dialed)\b")
# Phrases of a person on the line, waiting for an answer.
_HUMAN_WORDS = re.compile(
    r"\b(how can i help|how may i help|what can i do for you|speaking|who(?:'s| is) (?:this|calling|it)|"
    r"can i help|yes|yeah|hello)\b")


def words_say(text: str) -> AmdResult:
    """What a transcript's words alone say: machine phrases win (a machine may start with "hello")."""
    lowered = " ".join(re.sub(r"[^a-z' ]+", " ", text.lower()).split())
    if _MACHINE_WORDS.search(lowered):
        return "machine"
    if _HUMAN_WORDS.search(lowered):
        return "human"
    return "unknown"


@dataclass(frozen=True, slots=True)
class AmdSettings:
    """The classifier's thresholds (the [amd] config section holds the same keys)."""

    # Nobody has spoken this long after the answer: unknown ("silence").
    initial_silence_ms: int = 2500
    # A silence this long after speech ends the greeting: the other side waits for us.
    end_silence_ms: int = 700
    # A greeting that ended within this length is a person's.
    human_greeting_ms: int = 1800
    # A greeting still going at this length is a recording's, when there are no words to go by.
    machine_greeting_ms: int = 2700
    # With a recogniser listening: a greeting still going at this length whose words show no person.
    words_greeting_ms: int = 1900
    # The longest greeting a person gets when their words say it is one ("Sam speaking, how can I help").
    max_human_greeting_ms: int = 4000
    # How long a decision waits for words already on their way (a transcript of the greeting so far).
    word_wait_ms: int = 1200
    # The greeting so far is transcribed once it has run this long, and again every probe_every_ms.
    first_probe_ms: int = 700
    probe_every_ms: int = 500
    # Give up (unknown) at this point whatever has been heard.
    max_decision_ms: int = 5000


@dataclass(frozen=True, slots=True)
class Heard:
    """Everything the policy looks at; times in ms from the answer."""

    now_ms: int = 0
    onset_ms: int | None = None  # start of the first speech
    last_speech_ms: int = 0  # end of the latest speech frame
    beep: bool = False  # a steady tone long enough to be a beep (it may still be sounding)
    words: AmdResult = "unknown"  # what the transcripts so far say ("unknown": nothing telling, or none yet)
    words_expected: bool = False  # a recogniser listens: words may settle what the sound cannot
    pending_since_ms: int | None = None  # since when a transcript is on its way (None: none is)

    @property
    def greeting_ms(self) -> int:
        return 0 if self.onset_ms is None else self.last_speech_ms - self.onset_ms

    @property
    def silent_ms(self) -> int:
        return self.now_ms - (self.last_speech_ms if self.onset_ms is not None else 0)

    def waiting_for_words(self, settings: AmdSettings) -> bool:
        return self.pending_since_ms is not None and self.now_ms - self.pending_since_ms < settings.word_wait_ms


@dataclass(frozen=True, slots=True)
class AmdDecision:
    result: AmdResult
    reason: AmdReason
    at_ms: int  # when it was decided, from the answer
    greeting_ms: int  # how long the greeting had run by then


def greeting_limit(heard: Heard, settings: AmdSettings) -> int:
    """How long a greeting may run before it is a machine's. A person's words ("speaking", "how can I
    help") allow a long one; a recogniser that has heard nothing of a person allows less than sound alone
    can (the words of a machine would have settled it, and a person's would have shown)."""
    if heard.words == "human":
        return settings.max_human_greeting_ms
    return settings.words_greeting_ms if heard.words_expected else settings.machine_greeting_ms


def classify(heard: Heard, settings: AmdSettings) -> AmdDecision | None:
    """The decision `heard` supports, or None to keep listening."""

    def decided(result: AmdResult, reason: AmdReason) -> AmdDecision:
        return AmdDecision(result, reason, heard.now_ms, heard.greeting_ms)

    if heard.beep:
        return decided("machine", "beep")
    if heard.words == "machine":
        return decided("machine", "words")
    if heard.onset_ms is None:
        if heard.now_ms >= min(settings.initial_silence_ms, settings.max_decision_ms):
            return decided("unknown", "silence")
        return None
    greeting, limit = heard.greeting_ms, greeting_limit(heard, settings)
    waiting = heard.waiting_for_words(settings)
    if greeting >= limit and not waiting:
        return decided("machine", "long greeting")
    ended = heard.silent_ms >= settings.end_silence_ms
    if ended and greeting <= settings.human_greeting_ms:
        return decided("human", "short greeting")
    if ended and heard.words == "human":
        return decided("human", "words")
    if ended and not waiting:
        # A greeting between the two lengths with nothing telling in its words: the nearer length wins.
        middle = (settings.human_greeting_ms + limit) / 2
        return decided("machine", "long greeting") if greeting > middle else decided("human", "short greeting")
    if heard.now_ms >= settings.max_decision_ms:
        return decided("unknown", "undecided")
    return None


def probe_due(heard: Heard, last_probe_greeting_ms: int, settings: AmdSettings) -> bool:
    """Transcribe the greeting so far now? While it runs, undecided, nothing on its way, once it is long
    enough to hold a telling phrase and then every probe_every_ms of greeting."""
    if not heard.words_expected or heard.onset_ms is None or heard.pending_since_ms is not None:
        return False
    if heard.silent_ms >= settings.end_silence_ms:
        return False  # it is over: the recogniser's own transcript of the utterance is coming
    greeting = heard.greeting_ms
    return greeting >= settings.first_probe_ms and greeting - last_probe_greeting_ms >= settings.probe_every_ms


class AnsweringMachineClassifier:
    """Feeds `classify` from 20 ms frames and transcripts; the first decision sticks.

    Keeps listening after deciding, for what the leave-a-message outcome needs: the beep's end
    (`beep`), and how long it has been quiet (`heard.silent_ms`). `words_expected`: a recogniser will
    transcribe the greeting (its utterances, and the probes `probe_due` asks for).
    """

    def __init__(self, settings: AmdSettings, sample_rate: int = 8000, *, words_expected: bool = False) -> None:
        self.settings = settings
        self.sample_rate = sample_rate
        self._energy = AdaptiveEnergyClassifier(SPEECH_OVER_FLOOR_DB)
        self._beeps = BeepDetector(sample_rate)
        self._heard = Heard(words_expected=words_expected)
        self._run = 0  # voiced frames in a row
        self._owed = 0  # transcripts on their way
        self._last_probe_ms = 0  # the greeting's length at the last probe
        self.decision: AmdDecision | None = None
        self.beep: Beep | None = None  # the latest beep that has ended

    @property
    def heard(self) -> Heard:
        return self._heard

    @property
    def in_tone(self) -> bool:
        """A beep is sounding now (the message must not start over it)."""
        return self._beeps.in_tone

    def feed(self, pcm: bytes, now_ms: int) -> AmdDecision | None:
        """One frame that ended at `now_ms`; returns the decision when this frame made it."""
        voiced = self._energy.is_speech(pcm)
        ended = self._beeps.feed(pcm)
        if ended is not None:
            # The detector counts frames; the classifier's clock is the caller's (frames can start late):
            # the beep ended where this frame, the first after it, began.
            self.beep = Beep(now_ms - FRAME_MS - ended.length_ms, now_ms - FRAME_MS, ended.hz)
        heard = self._heard
        # A tone's frames are no speech, nor is the frame its end falls in (part tone, part quiet).
        self._run = self._run + 1 if voiced and not self._beeps.in_tone and ended is None else 0
        if self._run >= SPEECH_RUN_FRAMES:
            onset = heard.onset_ms if heard.onset_ms is not None else now_ms - self._run * FRAME_MS
            heard = replace(heard, onset_ms=onset, last_speech_ms=now_ms)
        heard = replace(heard, now_ms=now_ms, beep=heard.beep or self._beeps.in_tone or ended is not None)
        self._heard = heard
        return self._decide()

    def tick(self, now_ms: int) -> AmdDecision | None:
        """Time passing without frames (a callee that sends no RTP at all)."""
        if now_ms > self._heard.now_ms:
            self._heard = replace(self._heard, now_ms=now_ms)
        return self._decide()

    def probe_due(self) -> bool:
        return self.decision is None and probe_due(self._heard, self._last_probe_ms, self.settings)

    def probe_started(self) -> None:
        """A transcript of the greeting so far has been asked for."""
        self._last_probe_ms = self._heard.greeting_ms
        self._expect()

    def utterance_ended(self) -> None:
        """The recogniser owes a transcript for an utterance that just ended."""
        self._expect()

    def _expect(self) -> None:
        self._owed += 1
        if self._heard.pending_since_ms is None:
            self._heard = replace(self._heard, pending_since_ms=self._heard.now_ms)

    def transcript(self, text: str) -> AmdDecision | None:
        """A transcript arrived (of an utterance or of a probe; an empty one counts as arrived)."""
        self._owed = max(0, self._owed - 1)
        said = words_say(text)
        heard = self._heard
        words = said if said == "machine" or heard.words == "unknown" else heard.words
        self._heard = replace(heard, words=words, pending_since_ms=heard.pending_since_ms if self._owed else None)
        return self._decide()

    def _decide(self) -> AmdDecision | None:
        if self.decision is not None:
            return None
        self.decision = classify(self._heard, self.settings)
        return self.decision


# ---- leaving a message ----------------------------------------------------------------------------

# After a beep, this much quiet before speaking: the recorder starts on the beep's end, and a machine
# that beeps twice (some do) gets its second beep in first.
AFTER_BEEP_MS = 300


@dataclass(frozen=True, slots=True)
class MessageTiming:
    """When a message for a machine may start (the [amd] keys of the same names)."""

    # No beep came, but the greeting has been over for this long: the recording has begun.
    after_greeting_silence_ms: int = 1500
    # Whatever is heard, start this long after the decision (a greeting that never ends).
    beep_wait_ms: int = 20000


def message_may_start(heard: Heard, beep: Beep | None, in_tone: bool, decided_ms: int,
                      timing: MessageTiming) -> bool:
    """May the message for a machine start now? After its beep (and a breath), else once its greeting has
    been over long enough; never while a tone sounds, since that may be the beep itself."""
    if in_tone:
        return False
    if beep is not None and heard.now_ms - beep.end_ms >= AFTER_BEEP_MS and heard.last_speech_ms <= beep.end_ms:
        return True
    if heard.onset_ms is not None and heard.silent_ms >= timing.after_greeting_silence_ms:
        return True
    return heard.now_ms - decided_ms >= timing.beep_wait_ms
