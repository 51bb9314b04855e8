"""TurnOwner: the one owner of the caller's turn, from their first sound to the fate of the reply.

A caller who pauses mid-sentence ("I want to... um... book a table") produces several finals; answering
the first half is the most common way a voice agent feels rude, and every 100 ms after a finished
question is a wait the caller hears. Everything about the turn lives here: the words gathered so far
(PendingTurn), the finals still owed by the recogniser, the audio the end-of-turn model hears, its
verdict, the hold, the turn just released (while its reply can still be dropped), and the caller's own
pauses (pauses.py). The decisions are values from policy.py's pure functions; this class applies them.

When the caller stops speaking, everything starts at once: the recogniser decodes the turn (the pipeline
asked it), the end-of-turn model hears its end beside the decode, and a reply is prepared as soon as the
words exist. While words the caller already spoke are still being decoded, nothing is released: a
decision then would answer half of what was said.

A caller who goes on right after a release holds the reply at once; if their words add to the turn, the
reply is dropped (or stopped) and the whole sentence is pending again (`_took_back`).

The pipeline routes the caller's input here (it is a CallerInput, internal/pipeline/capture.py's
protocol): a digit form or an answering-machine listener takes the input instead, for a while.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from voicegate.internal.audio.pitch import end_rise
from voicegate.internal.audio.syllables import syllable_nuclei
from voicegate.internal.config.sections import PipelineConfig
from voicegate.internal.llm.base import Turn
from voicegate.internal.stt.base import Transcript
from voicegate.internal.turn.bargein import Overlap, OverlapKind, classify_overlap, is_backchannel
from voicegate.internal.turn.fusion import NOT_ASKED, TurnFusion, cleanness
from voicegate.internal.turn.keypad import Keypad
from voicegate.internal.turn.pauses import CallerPauses
from voicegate.internal.turn.pending import Decision, PendingTurn, Release, TurnTimes
from voicegate.internal.turn.policy import (
    NOT_UNDERSTOOD_SPEECH_MS,
    VERDICT_WAIT_MS,
    asks_model,
    asks_model_early,
    fused_decision,
    text_rule_wait_ms,
    verdict_threshold,
    worth_preparing,
)
from voicegate.internal.turn.ports import EndOfTurnModel, Line, Replies
from voicegate.internal.turn.smart_turn import without_long_pauses
from voicegate.internal.turn.text_cues import added_words, opens_lead_in, says_it_goes_on

log = logging.getLogger(__name__)

TURN_AUDIO_FRAMES = 400  # 8 s of 20 ms frames: what the end-of-turn model hears
# The silence after the last word that the model hears. Measured on a neural voice: past ~150 ms of
# silence, unfinished sentences start to sound "complete".
END_OF_TURN_SILENCE_MS = 100
FRAME_MS = 20


@dataclass(frozen=True, slots=True)
class TurnSettings:
    """The turn's knobs from [pipeline] (docs/configuration.md)."""

    merge_ms: int
    quiet_ms: int
    max_turn_wait_ms: int
    threshold: float
    barge_in: bool
    barge_in_confirm_ms: int
    vad_offset_ms: int
    early_verdict: bool = True
    adaptive_hold: bool = True
    head_threshold: float = 0.55
    resume_after_false_interruption_s: float = 0.0

    @classmethod
    def from_config(cls, config: PipelineConfig) -> TurnSettings:
        return cls(config.turn_merge_ms, config.user_speech_quiet_ms, config.max_turn_wait_ms,
                   config.end_of_turn_threshold, config.barge_in, config.barge_in_confirm_ms, config.vad_offset_ms,
                   config.end_of_turn_early, config.adaptive_hold, config.phone_turn_threshold,
                   config.resume_after_false_interruption_s)


class TurnOwner:
    def __init__(self, settings: TurnSettings, replies: Replies, line: Line, sample_rate: int, *,
                 model: EndOfTurnModel | None = None, fusion: TurnFusion | None = None,
                 backchannels: frozenset[str] = frozenset(), prefetch: Callable[[str], None] | None = None,
                 intercept: Callable[[str, str], bool] = lambda text, keys: False,
                 recogniser_verdicts: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.replies = replies
        self.line = line
        self.sample_rate = sample_rate
        self.model = model
        self.fusion = fusion
        self.backchannels = backchannels
        self._prefetch_words = prefetch
        self._intercept = intercept  # a turn that is not for the agent (the recording's consent answer)
        # The recogniser's finals carry the phone-band head's verdict (Transcript.end_of_turn): the sound of
        # the turn is judged by the decode itself, and the end-of-turn model is asked only when one lacks it.
        self.recogniser_verdicts = recogniser_verdicts
        self._head_verdict = False  # the latest verdict is the head's (trained on noisy lines: full weight)
        self._clock = clock
        self.pauses = CallerPauses()
        self.keypad = Keypad(self._keys_entered)
        # The turn being gathered, and the verdict on its latest silence.
        self.pending: PendingTurn | None = None
        self.probability: float | None = None  # the fused verdict for the latest silence, once decided
        self.audio_probability: float | None = None  # the end-of-turn model's, for the latest silence
        self._verdict_pending = False
        self._silences = 0  # numbers the caller's silences, so a late verdict for an earlier one is ignored
        self._asked: int | None = None  # the silence whose verdict the words are waiting to judge
        self._verdict_task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._awaiting = 0  # finals owed for speech the caller already finished
        # The caller's utterance in progress.
        self._speaking = False
        self._over_agent = False  # began while the agent was audible (a backchannel or a barge-in)
        # The agent is paused for the caller's sound over it until the words say what it was (bargein.py).
        self._paused = False
        self._false_alarm_timer: asyncio.TimerHandle | None = None
        self._speech_frames = 0  # voiced frames of the latest utterance
        self._turn_voiced_frames = 0  # ... of the whole turn
        self._longest_frames = 0  # ... of its longest utterance
        self._speech_ended_at = 0.0  # monotonic time the caller last stopped speaking (0: not yet)
        self._gap_ms = 0.0  # the silence before the latest utterance
        self._final_at = 0.0
        self.turn_audio: deque[tuple[bytes, bool]] = deque(maxlen=TURN_AUDIO_FRAMES)
        # The turn released last, while its reply can still be dropped for the caller going on with it.
        self.released: PendingTurn | None = None
        self.continuing = False  # the caller spoke right after a release: are they going on?

    @property
    def busy(self) -> bool:
        """Words are gathering or owed, or keys are being typed."""
        return self.pending is not None or self._awaiting > 0 or bool(self.keypad.pending)

    @property
    def holds_words(self) -> bool:
        """A whole-turn transcript now replaces words the caller was shown (a pending or released turn)."""
        return self.pending is not None or self.continuing

    def close(self) -> None:
        self.pending = None
        self._cancel_timer()
        self._cancel_false_alarm()
        self.keypad.close()
        if self._verdict_task is not None:
            self._verdict_task.cancel()

    # ---- the caller's sound (CallerInput) -----------------------------------------------------------

    def audio(self, pcm: bytes, voiced: bool) -> None:
        """Every inbound frame (hot path)."""
        if self.model is not None or self._over_agent:  # the model's input; over the agent, its syllables
            self.turn_audio.append((pcm, voiced))
        if not (self._speaking and voiced):
            return
        self._speech_frames += 1
        self._turn_voiced_frames += 1
        self._longest_frames = max(self._longest_frames, self._speech_frames)
        settings = self.settings
        if (self._over_agent and settings.barge_in and not self._paused and self.replies.active
                and self._speech_frames * FRAME_MS >= settings.barge_in_confirm_ms):
            if settings.resume_after_false_interruption_s > 0:
                # Long enough to be a turn, or a coughing fit: silent now, the words decide (_take_final).
                self._paused = True
                self.replies.pause()
            else:
                self._stop("caller spoke over the agent")

    def speech_started(self, preroll_frames: int = 0) -> bool:
        """The caller started speaking; True when this starts a new turn (the recogniser forgets the last)."""
        now = self._clock()
        self._speaking = True
        self._speech_frames = 0
        self._gap_ms = ((now - self._speech_ended_at) * 1000.0 + self.settings.vad_offset_ms
                        if self._speech_ended_at else 0.0)
        # Speech soon after a release may be the rest of that turn: its reply is held, within this frame,
        # until the words tell (nothing of it plays over the caller meanwhile). Speech that follows such
        # speech before its words are in belongs to the same question, even once the window has passed
        # ("Yes, | yes." begun 1 s into the reply): judged apart, as words over a held (so silent) agent,
        # the second half was a turn of its own.
        self.continuing = self.released is not None and (self.continuing or self.replies.absorbable())
        if self.continuing:
            self.replies.hold()
        else:
            self.released = None
        if not self.replies.active:
            self._paused = False
        self._cancel_false_alarm()
        self._over_agent = not self.continuing and (self.replies.audible or self._paused)
        new_turn = self.pending is None and not self._awaiting and not self.continuing
        if new_turn:
            keep = preroll_frames + self.line.profile.onset_frames
            while len(self.turn_audio) > keep:
                self.turn_audio.popleft()
            self._turn_voiced_frames = self._longest_frames = 0
        elif self.pending is not None:
            self.pauses.went_on_after(self._gap_ms)  # an inner pause of this caller's
        self._asked = None
        self._verdict_pending = False
        self.audio_probability = self.probability = None
        self._cancel_timer()
        if self._over_agent and self.settings.barge_in:
            self.replies.duck(True)
        return new_turn

    def speech_ended(self, final_owed: bool) -> None:
        """The VAD ended an utterance; `final_owed`: the recogniser will send its final."""
        now = self._clock()
        self._speaking = False
        self._speech_ended_at = now
        if final_owed:
            self._awaiting += 1
        window = self.settings.resume_after_false_interruption_s
        if self._over_agent and self.settings.barge_in and window > 0 and final_owed and self.replies.active:
            # Ducked (or paused) until the words say what the sound was; no later than the window.
            self._false_alarm_timer = asyncio.get_running_loop().call_later(
                window, self._false_alarm, Overlap(OverlapKind.NON_SPEECH, "no words in time"))
        else:
            self.replies.duck(False)
            if self._paused:
                self._false_alarm(Overlap(OverlapKind.NON_SPEECH, "too short to decode"))
        sound = self.model is not None or self.recogniser_verdicts
        ask = sound and asks_model(self._speech_frames * FRAME_MS)
        self._silences += 1
        self._verdict_pending = ask
        self._head_verdict = False
        self.audio_probability = self.probability = None
        if self.pending is not None:
            self._arm()
        if ask:
            self._asked = self._silences
            if self.settings.early_verdict and asks_model_early(self._over_agent, self.recogniser_verdicts):
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
                and not self._awaiting and not self._speaking and self._verdict_pending):
            # The decode of the turn up to this silence judged its sound too.
            self._verdict_pending = False
            self._head_verdict = True
            self.audio_probability = transcript.end_of_turn
        if transcript.superseded:
            return  # a later final of this turn holds the same words and more
        text = transcript.text.strip()
        if not transcript.final:
            if (self.settings.barge_in and self.replies.active and self._over_agent
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
        if count > 0 and self._over_agent and not self._awaiting and not self._speaking:
            self._false_alarm(Overlap(OverlapKind.NON_SPEECH, "no words came"))
        if count > 0 and not self.replies.active and not self._over_agent:
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
        times = TurnTimes(released=self._clock())
        self.replies.release(Turn(text=text), None, times, Release("typed"))

    # ---- the words ------------------------------------------------------------------------------------

    def _take_final(self, text: str, transcript: Transcript) -> None:
        if self.continuing and self._took_back(text, transcript):
            self._prefetch()
            return
        if not text:
            self._add_final("")
            if self._over_agent:
                self._settled_over_agent(Overlap(OverlapKind.NON_SPEECH, "nothing recognised"))
            elif transcript.overloaded and not self.replies.active:
                self.replies.too_busy()
            elif (self._speech_frames * FRAME_MS >= NOT_UNDERSTOOD_SPEECH_MS and not self._over_agent
                  and not self.replies.active):
                self.replies.not_understood()
            return
        if self._over_agent:
            overlap = self._overlap(text, transcript)
            if not overlap.takes_turn:
                log.info("sound over the agent ignored", extra={"text": text, "overlap": overlap.kind.value,
                                                                "reason": overlap.reason})
                self._add_final("")
                self._settled_over_agent(overlap)
                return
        if self.replies.active and self.settings.barge_in:
            self._stop("caller turn while the agent was speaking")
        self._add_final(text, transcript.confidence, self._over_agent, replace=transcript.whole_turn)
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
        if not self._awaiting and not self._speaking:
            self._false_alarm(overlap)

    def _false_alarm(self, overlap: Overlap) -> None:
        self._cancel_false_alarm()
        if self._speaking:
            return  # the caller goes on: the end of this utterance decides
        self._paused = False
        self.replies.false_alarm(overlap.kind.value, overlap.reason)

    def _stop(self, reason: str) -> None:
        self._cancel_false_alarm()
        self._paused = False
        self.replies.interrupt(reason)

    def _cancel_false_alarm(self) -> None:
        if self._false_alarm_timer is not None:
            self._false_alarm_timer.cancel()
            self._false_alarm_timer = None

    def _add_final(self, text: str, confidence: float | None = None, over_agent: bool = False,
                   replace: bool = False) -> None:
        text = text.strip()
        if text:
            if self.pending is None:
                self.pending = PendingTurn(text, self._clock(), confidence, over_agent)
            else:
                self.pending.add(text, confidence, over_agent, replace)
        if self.pending is not None:
            self._arm()

    def _words_in(self) -> None:
        """The words for the latest silence are in (none owed): prepare the reply, settle the verdict."""
        if self._awaiting:
            return
        self._prepare_from_words()
        if self._asked is None:
            return
        silence, self._asked = self._asked, None
        pending, fusion = self.pending, self.fusion
        if pending is None:
            self._set_verdict(silence, None)  # no words at all: the text weights decide
            return
        if not self._verdict_pending:
            return  # the model already answered (asked beside the decode)
        if fusion is not None and not fusion.needs_audio(pending.text, self.settings.threshold, self.line.snr_db):
            self._set_verdict(silence, NOT_ASKED)  # the words decide, whatever it would sound like
            return
        if self._verdict_task is None or self._verdict_task.done() or not self.settings.early_verdict:
            self._ask_model(silence)

    def _prefetch(self) -> None:
        if self._prefetch_words is not None and self.pending is not None:
            # Overlap retrieval with the hold; the turn reuses it when no more words arrive.
            self._prefetch_words(self.pending.text)

    # ---- the end-of-turn model ---------------------------------------------------------------------

    def _ask_model(self, silence: int) -> None:
        if self.model is None:  # only the recogniser's head could have judged the sound, and it did not
            self._set_verdict(silence, None)
            return
        if self._verdict_task is not None:
            self._verdict_task.cancel()
        extra = max(0, self.line.profile.offset_frames - END_OF_TURN_SILENCE_MS // FRAME_MS)
        frames = list(self.turn_audio)
        audio = without_long_pauses(frames[:len(frames) - extra] if extra else frames)
        self._verdict_task = asyncio.create_task(self._verdict(silence, audio), name="end-of-turn")

    async def _verdict(self, silence: int, audio: bytes) -> None:
        assert self.model is not None
        loop = asyncio.get_running_loop()
        asked = loop.time()
        try:
            probability = await self.model.predict(audio, self.sample_rate)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("end-of-turn model failed; the words decide this turn")
            probability = None
        if probability is not None:  # None: failed, or the model's pool was full
            self.replies.stage("end_of_turn_model", (loop.time() - asked) * 1000.0)
        self._set_verdict(silence, probability)

    def _set_verdict(self, silence: int, probability: float | None) -> None:
        """The model's P(complete) for silence number `silence` (None: it failed; the words decide)."""
        if silence != self._silences or self._speaking:
            return  # the caller spoke again since: that silence is no longer the question
        self._verdict_pending = False
        self._head_verdict = False
        self.audio_probability = probability
        if self.pending is not None:
            self._arm()

    # ---- the hold ---------------------------------------------------------------------------------

    def _decision(self, pending: PendingTurn) -> Decision | None:
        """How much longer to hold the pending turn; None: not decidable yet (a verdict is still out)."""
        now = self._clock()
        quiet = (now - self._speech_ended_at) * 1000.0 if self._speech_ended_at else None
        settings = self.settings
        if self.fusion is None:
            self.probability = None
            wait = text_rule_wait_ms(pending.text, merge_ms=settings.merge_ms, quiet_ms=settings.quiet_ms,
                                     since_speech_end_ms=quiet, since_first_final_ms=(now - pending.began) * 1000.0)
            return Decision(wait, "text_rules")
        if self._verdict_pending and (quiet or 0.0) < VERDICT_WAIT_MS:
            return None
        head = self._head_verdict and not says_it_goes_on(pending.text)
        sound = self.audio_probability if head or not self._head_verdict else None
        self.probability = self.fusion.probability(sound, pending.text, self.line.snr_db, sound_trained_on_noise=head)
        ceiling = (self.pauses.ceiling_ms(settings.max_turn_wait_ms) if settings.adaptive_hold
                   else float(settings.max_turn_wait_ms))
        # A lead-in ("Before anything else, | the part that matters") keeps the usual threshold with the head's
        # sound: the head heard 0.63 at such a comma, and a person's "Unless to be rather | cold-hearted ..."
        # reached 0.57 at its break; a sure finish still goes at once.
        lower = head and not opens_lead_in(pending.text)
        threshold = (verdict_threshold(settings.threshold, settings.head_threshold, cleanness(self.line.snr_db))
                     if lower else settings.threshold)
        return fused_decision(self.probability, threshold=threshold, max_wait_ms=settings.max_turn_wait_ms,
                              caller_ceiling_ms=ceiling, since_silence_ms=quiet or 0.0)

    def _arm(self) -> None:
        self._cancel_timer()
        pending = self.pending
        if pending is None or self._speaking or self._awaiting:
            # While a final is owed, a decision now would answer half of what was said (on a loaded machine
            # recognition runs seconds behind the caller). The pipeline's recognition deadline
            # (`turn_timeout_s`) calls finals_lost when a final never comes, which re-arms this.
            return
        loop = asyncio.get_running_loop()
        decision = self._decision(pending)
        if decision is None:  # the model is still out: look again when it answers or its time is up
            quiet = (self._clock() - self._speech_ended_at) * 1000.0 if self._speech_ended_at else 0.0
            self._timer = loop.call_later(max(0.0, VERDICT_WAIT_MS - quiet) / 1000.0, self._arm)
            return
        if worth_preparing(decision.probability if decision.reason != "text_rules" else None, pending.text):
            self._prepare(pending)
        self._timer = loop.call_later(decision.wait_ms / 1000.0, self._release, decision)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _release(self, decision: Decision, waited: bool = False) -> None:
        if not self.settings.barge_in and self.replies.active and self.pending is not None:
            # Barge-in off: what the caller said over the agent is their next turn, answered once the agent
            # has finished (a release now would cancel its reply). Looked at again each frame.
            self._timer = asyncio.get_running_loop().call_later(FRAME_MS / 1000.0, self._release, decision, True)
            return
        pending, self.pending = self.pending, None
        self._cancel_timer()
        if pending is None:
            return
        now = self._clock()
        times = TurnTimes(self._speech_ended_at, self._final_at, now)
        silence_ms = 0.0
        if self._speech_ended_at:
            # From the caller's last sound (the VAD's offset before its decision) to the release.
            silence_ms = (now - self._speech_ended_at) * 1000.0 + self.settings.vad_offset_ms
            if not waited:  # the agent's speech it waited out is no end-of-turn latency
                self.replies.stage("end_of_turn", silence_ms)
        if self._intercept(pending.text, ""):
            self.released = None
            return
        self.released = pending
        release = Release(decision.reason, decision.probability, silence_ms)
        self.replies.release(Turn(text=pending.text), pending.confidence, times, release)

    # ---- a reply ready in time --------------------------------------------------------------------

    def _prepare_from_words(self) -> None:
        pending, fusion = self.pending, self.fusion
        if pending is not None and fusion is not None:
            if worth_preparing(fusion.probability(None, pending.text, self.line.snr_db), pending.text):
                self._prepare(pending)

    def _prepare(self, pending: PendingTurn) -> None:
        self.replies.prepare(pending.text, pending.confidence, TurnTimes(self._speech_ended_at, self._final_at))

    # ---- going on after a release -----------------------------------------------------------------

    def _took_back(self, text: str, transcript: Transcript) -> bool:
        """The caller spoke right after a release (the reply is held): did they go on with their sentence?

        Yes: the reply is dropped (or, if it had begun, stays stopped) and the released turn, with what
        they added, is pending again, to be answered once as a whole; True. Only noise or "mm": the reply
        plays on; True. Too late to take the reply back (a tool with side effects ran meanwhile): False,
        and what they said is a turn of its own.
        """
        self.continuing = False
        released, self.released = self.released, None
        if released is None:
            self.replies.resume()
            return False
        added = added_words(released.text, text) if transcript.whole_turn else text.split()
        if not added or is_backchannel(" ".join(added), self.backchannels):
            if self._speaking or self._awaiting:
                # More of the caller's words are coming ("Yes, | yes." or "Yes, | and on Sunday?"): they
                # decide, and the reply stays held until they do (resumed now, the rest would be judged
                # as a turn of its own).
                self.continuing, self.released = True, released
                return True
            self.replies.resume()
            self._add_final("")
            return True
        if not self.replies.absorb():
            return False
        self.pauses.went_on_after(self._gap_ms)  # released too soon: this caller pauses that long
        self._cancel_timer()
        self.pending = released
        self._add_final(text, transcript.confidence, replace=transcript.whole_turn)
        return True

    def _end_continuation(self) -> None:
        """No words are coming for the speech after a release: the held reply plays on."""
        if self.continuing:
            self.continuing = False
            self.released = None
            self.replies.resume()

    # ---- keys -------------------------------------------------------------------------------------

    def _keys_entered(self, digits: str) -> None:
        if self._intercept("", digits):
            return
        self.released = None
        if self.replies.active:
            self._stop("keypad input")
        times = TurnTimes(released=self._clock())
        self.replies.release(Turn(text="", dtmf=digits), None, times, Release("keypad"))
