"""TurnOwner: the one owner of the caller's turn, from their first sound to the fate of the reply.

A caller who pauses mid-sentence ("I want to... um... book a table") produces several finals; answering
the first half is the most common way a voice agent feels rude, and every 100 ms after a finished
question is a wait the caller hears. Everything about the turn lives here and in the half it builds on,
TurnRelease (release.py: the words gathered so far, the finals still owed, the end-of-turn verdict, the
hold and the release). This half takes the caller's input: their sound (the VAD's events, the audio the
end-of-turn model and the barge-in rules hear), their words, keys and typed text; sound over the agent
(ducked, perhaps paused, until the words say what it was: bargein.py); and a caller going on right after a
release, which holds the reply at once: if their words add to the turn, the reply is dropped (or stopped)
and the whole sentence is pending again (`_took_back`). Where the caller is in all this is one explicit
state (state.py: `TurnState`, moved only by `next_state`'s table). The decisions are values from
policy.py's and bargein.py's pure functions; this class applies them.

When the caller stops speaking, everything starts at once: the recogniser decodes the turn (the pipeline
asked it), the end-of-turn model hears its end beside the decode, and a reply is prepared as soon as the
words exist.

The pipeline routes the caller's input here (it is a CallerInput, internal/pipeline/capture.py's
protocol): a digit form or an answering-machine listener takes the input instead, for a while.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable

from voicegate.internal.audio.pitch import end_rise
from voicegate.internal.audio.syllables import syllable_nuclei
from voicegate.internal.event_envelope import EventSink
from voicegate.internal.llm.base import Turn
from voicegate.internal.stt.base import Transcript
from voicegate.internal.turn.bargein import Overlap, OverlapKind, classify_overlap, is_backchannel
from voicegate.internal.turn.events import OverlapEvent
from voicegate.internal.turn.fusion import TurnFusion
from voicegate.internal.turn.keypad import Keypad
from voicegate.internal.turn.pending import Release, TurnTimes
from voicegate.internal.turn.policy import NOT_UNDERSTOOD_SPEECH_MS, asks_model, asks_model_early
from voicegate.internal.turn.ports import EndOfTurnModel, Line, Replies
from voicegate.internal.turn.release import TurnRelease
from voicegate.internal.turn.settings import FRAME_MS, TurnSettings
from voicegate.internal.turn.state import TurnState, TurnStep, Verdict, heard
from voicegate.internal.turn.text_cues import added_words

__all__ = ["TurnOwner", "TurnSettings"]

log = logging.getLogger(__name__)


class TurnOwner(TurnRelease):
    def __init__(self, settings: TurnSettings, replies: Replies, line: Line, sample_rate: int, *,
                 model: EndOfTurnModel | None = None, fusion: TurnFusion | None = None,
                 backchannels: frozenset[str] = frozenset(), prefetch: Callable[[str], None] | None = None,
                 intercept: Callable[[str, str], bool] = lambda text, keys: False,
                 recogniser_verdicts: bool = False, clock: Callable[[], float] = time.monotonic,
                 events: EventSink | None = None) -> None:
        super().__init__(settings, replies, line, sample_rate, model=model, fusion=fusion, prefetch=prefetch,
                         intercept=intercept, recogniser_verdicts=recogniser_verdicts, clock=clock, events=events)
        self.backchannels = backchannels
        self.keypad = Keypad(self._keys_entered)
        # The caller's utterance in progress (or the latest).
        self._false_alarm_timer: asyncio.TimerHandle | None = None
        self._speech_frames = 0  # voiced frames of the latest utterance
        self._turn_voiced_frames = 0  # ... of the whole turn
        self._longest_frames = 0  # ... of its longest utterance
        self._gap_ms = 0.0  # the silence before the latest utterance

    @property
    def continuing(self) -> bool:
        """The caller spoke right after a release: are they going on?"""
        return self.state.continuing

    @property
    def busy(self) -> bool:
        """Words are gathering or owed, or keys are being typed."""
        return self.pending is not None or self._awaiting > 0 or bool(self.keypad.pending)

    @property
    def holds_words(self) -> bool:
        """A whole-turn transcript now replaces words the caller was shown (a pending or released turn)."""
        return self.pending is not None or self.state.continuing

    def close(self) -> None:
        self.pending = None
        self._cancel_timer()
        self._cancel_false_alarm()
        self.keypad.close()
        if self._questions is not None:
            self._questions.close()

    # ---- the caller's sound (CallerInput) -----------------------------------------------------------

    def audio(self, pcm: bytes, voiced: bool) -> None:
        """Every inbound frame (hot path)."""
        state = self.state
        if self.model is not None or state.over_agent:  # the model's input; over the agent, its syllables
            self.turn_audio.append((pcm, voiced))
        if not (state.speaking and voiced):
            return
        self._speech_frames += 1
        self._turn_voiced_frames += 1
        self._longest_frames = max(self._longest_frames, self._speech_frames)
        settings = self.settings
        if (state is TurnState.OVER_AGENT and settings.barge_in and self.replies.active
                and self._speech_frames * FRAME_MS >= settings.barge_in_confirm_ms):
            if settings.resume_after_false_interruption_s > 0:
                # Long enough to be a turn, or a coughing fit: silent now, the words decide (_take_final).
                self._step(TurnStep.AGENT_PAUSED)
                self.replies.pause()
            else:
                self._stop("caller spoke over the agent")

    def speech_started(self, preroll_frames: int = 0) -> bool:
        """The caller started speaking; True when this starts a new turn (the recogniser forgets the last)."""
        now = self._clock()
        self._speech_frames = 0
        self._gap_ms = ((now - self._speech_ended_at) * 1000.0 + self.settings.vad_offset_ms
                        if self._speech_ended_at else 0.0)
        # Speech soon after a release may be the rest of that turn: its reply is held, within this frame,
        # until the words tell (nothing of it plays over the caller meanwhile). Speech that follows such
        # speech before its words are in belongs to the same question, even once the window has passed
        # ("Yes, | yes." begun 1 s into the reply): judged apart, as words over a held (so silent) agent,
        # the second half was a turn of its own.
        after_release = self.released is not None and (self.state.continuing or self.replies.absorbable())
        if after_release:
            self.replies.hold()
        else:
            self.released = None
        if not self.replies.active:
            self._step(TurnStep.AGENT_DONE)
        self._cancel_false_alarm()
        self._step(heard(after_release, self.replies.audible, self.state.agent_paused))
        new_turn = self.pending is None and not self._awaiting and not after_release
        if new_turn:
            keep = preroll_frames + self.line.profile.onset_frames
            while len(self.turn_audio) > keep:
                self.turn_audio.popleft()
            self._turn_voiced_frames = self._longest_frames = 0
        elif self.pending is not None:
            self.pauses.went_on_after(self._gap_ms)  # an inner pause of this caller's
        self._asked = None
        self.verdict = Verdict.NONE
        self.audio_probability = self.probability = None
        self._cancel_timer()
        if self.state.over_agent and self.settings.barge_in:
            self.replies.duck(True)
        return new_turn

    def speech_ended(self, final_owed: bool) -> None:
        """The VAD ended an utterance; `final_owed`: the recogniser will send its final."""
        now = self._clock()
        self._step(TurnStep.STOPPED_SPEAKING)
        self._speech_ended_at = now
        if final_owed:
            self._awaiting += 1
        window = self.settings.resume_after_false_interruption_s
        over_agent = self.state.over_agent
        if over_agent and self.settings.barge_in and window > 0 and final_owed and self.replies.active:
            # Ducked (or paused) until the words say what the sound was; no later than the window.
            self._false_alarm_timer = asyncio.get_running_loop().call_later(
                window, self._false_alarm, Overlap(OverlapKind.NON_SPEECH, "no words in time"))
        else:
            self.replies.duck(False)
            if self.state.agent_paused:
                self._false_alarm(Overlap(OverlapKind.NON_SPEECH, "too short to decode"))
        sound = self.model is not None or self.recogniser_verdicts
        ask = sound and asks_model(self._speech_frames * FRAME_MS)
        self._silences += 1
        self.verdict = Verdict.OWED if ask else Verdict.NONE
        self.audio_probability = self.probability = None
        if self.pending is not None:
            self._arm()
        if ask:
            self._asked = self._silences
            if self.settings.early_verdict and asks_model_early(over_agent, self.recogniser_verdicts):
                self._ask_model(self._silences)  # beside the decode, not after it
        if not final_owed:
            self._words_in()

    def transcript(self, transcript: Transcript) -> None:
        """A partial or final from the recogniser."""
        if transcript.final and self._awaiting:
            self._awaiting -= 1
            if not self._awaiting and self.pending is not None:
                self._arm()
        if (transcript.final and transcript.end_of_turn is not None and self.recogniser_verdicts
                and not self._awaiting and not self.state.speaking and self.verdict is Verdict.OWED):
            # The decode of the turn up to this silence judged its sound too.
            self.verdict = Verdict.HEAD
            self.audio_probability = transcript.end_of_turn
        if transcript.superseded:
            return  # a later final of this turn holds the same words and more
        text = transcript.text.strip()
        if not transcript.final:
            if (self.settings.barge_in and self.replies.active and self.state.over_agent
                    and self._overlap(text, transcript).takes_turn):
                self._stop("meaningful words over the agent")
            return
        self._final_at = self._clock()
        if self._speech_ended_at:  # this final belongs to the turn about to be answered
            self.replies.stage("stt", (self._final_at - self._speech_ended_at) * 1000.0)
        self._take_final(text, transcript)
        self._words_in()

    def finals_lost(self, count: int) -> None:
        """Finals the recogniser owed are not coming (it died, or gave nothing in time)."""
        self._awaiting = max(0, self._awaiting - count)
        self._end_continuation()
        state = self.state
        if count > 0 and state.over_agent and not self._awaiting and not state.speaking:
            self._false_alarm(Overlap(OverlapKind.NON_SPEECH, "no words came"))
        if count > 0 and not self.replies.active and not state.over_agent:
            self.replies.not_understood()
        if self.pending is not None and not self._awaiting:
            self._arm()

    def digit(self, digit: str) -> None:
        self.keypad.press(digit)

    def typed(self, text: str) -> None:
        """A typed turn (the browser's text box): answered at once, like speech without the recogniser."""
        if self.replies.active:
            self._stop("typed input")
        self.released = None
        if self._intercept(text, ""):
            return
        self._announce_release(Turn(text=text), None, TurnTimes(released=self._clock()), Release("typed"))

    # ---- the words ------------------------------------------------------------------------------------

    def _take_final(self, text: str, transcript: Transcript) -> None:
        if self.state.continuing and self._took_back(text, transcript):
            self._prefetch()
            return
        if not text:
            self._add_final("")
            if self.state.over_agent:
                self._settled_over_agent(Overlap(OverlapKind.NON_SPEECH, "nothing recognised"))
            elif transcript.overloaded and not self.replies.active:
                self.replies.too_busy()
            elif self._speech_frames * FRAME_MS >= NOT_UNDERSTOOD_SPEECH_MS and not self.replies.active:
                self.replies.not_understood()
            return
        over_agent = self.state.over_agent
        if over_agent:
            overlap = self._overlap(text, transcript)
            if not overlap.takes_turn:
                log.info("sound over the agent ignored", extra={"text": text, "overlap": overlap.kind.value,
                                                                "reason": overlap.reason})
                self._add_final("")
                self._settled_over_agent(overlap)
                return
        if self.replies.active and self.settings.barge_in:
            self._stop("caller turn while the agent was speaking")
        self._add_final(text, transcript.confidence, over_agent, replace=transcript.whole_turn)
        self._prefetch()

    # ---- sound over the agent -----------------------------------------------------------------------

    def _overlap(self, text: str, transcript: Transcript) -> Overlap:
        evidence = transcript.evidence
        pcm = functools.cache(self._turn_pcm)  # the sound's audio, joined once and only when it is measured
        return classify_overlap(text, self._turn_voiced_frames * FRAME_MS, longest_ms=self._longest_frames * FRAME_MS,
                                no_speech_prob=evidence.no_speech_prob if evidence else None,
                                avg_logprob=evidence.avg_logprob if evidence else None,
                                backchannels=self.backchannels,
                                syllables=lambda: syllable_nuclei(pcm(), self.sample_rate),
                                rise=lambda: end_rise(pcm(), self.sample_rate))  # only when doubted

    def _turn_pcm(self) -> bytes:
        return b"".join(pcm for pcm, _ in self.turn_audio)

    def _settled_over_agent(self, overlap: Overlap) -> None:
        """The words of a sound over the agent are in and it was no turn: once nothing more is owed, the
        agent plays on (picking up the sentence it paused in from its start)."""
        if not self._awaiting and not self.state.speaking:
            self._false_alarm(overlap)

    def _false_alarm(self, overlap: Overlap) -> None:
        self._cancel_false_alarm()
        if self.state.speaking:
            return  # the caller goes on: the end of this utterance decides
        self._step(TurnStep.AGENT_RESUMED)
        after = self.replies.false_alarm()
        if after is None:
            return  # the agent was neither ducked nor paused: nothing the caller heard changed
        kind, reason = overlap.kind.value, overlap.reason
        action, sentence = after
        if action == "resumed":
            log.info("agent resumed after a false interruption", extra={"overlap": kind, "reason": reason})
        self.events.emit(OverlapEvent(kind=kind, reason=reason, action=action, sentence=sentence))

    def _stop(self, reason: str) -> None:
        self._cancel_false_alarm()
        self._step(TurnStep.AGENT_STOPPED)
        self.replies.interrupt(reason)

    def _cancel_false_alarm(self) -> None:
        if self._false_alarm_timer is not None:
            self._false_alarm_timer.cancel()
            self._false_alarm_timer = None

    # ---- going on after a release -----------------------------------------------------------------

    def _took_back(self, text: str, transcript: Transcript) -> bool:
        """The caller spoke right after a release (the reply is held): did they go on with their sentence?

        Yes: the reply is dropped (or, if it had begun, stays stopped) and the released turn, with what
        they added, is pending again, to be answered once as a whole; True. Only noise or "mm": the reply
        plays on; True. Too late to take the reply back (a tool with side effects ran meanwhile): False,
        and what they said is a turn of its own.
        """
        released, self.released = self.released, None
        if released is None:
            self._step(TurnStep.CONTINUATION_SETTLED)
            self.replies.resume()
            return False
        added = added_words(released.text, text) if transcript.whole_turn else text.split()
        if not added or is_backchannel(" ".join(added), self.backchannels):
            if self.state.speaking or self._awaiting:
                # More of the caller's words are coming ("Yes, | yes." or "Yes, | and on Sunday?"): they
                # decide, and the reply stays held until they do (resumed now, the rest would be judged
                # as a turn of its own).
                self.released = released
                return True
            self._step(TurnStep.CONTINUATION_SETTLED)
            self.replies.resume()
            self._add_final("")
            return True
        self._step(TurnStep.CONTINUATION_SETTLED)
        if not self.replies.absorb():
            return False
        self.pauses.went_on_after(self._gap_ms)  # released too soon: this caller pauses that long
        self._cancel_timer()
        self.pending = released
        self._add_final(text, transcript.confidence, replace=transcript.whole_turn)
        return True

    def _end_continuation(self) -> None:
        """No words are coming for the speech after a release: the held reply plays on."""
        if self.state.continuing:
            self._step(TurnStep.CONTINUATION_SETTLED)
            self.released = None
            self.replies.resume()

    # ---- keys -------------------------------------------------------------------------------------

    def _keys_entered(self, digits: str) -> None:
        if self._intercept("", digits):
            return
        self.released = None
        if self.replies.active:
            self._stop("keypad input")
        self._announce_release(Turn(text="", dtmf=digits), None, TurnTimes(released=self._clock()), Release("keypad"))
