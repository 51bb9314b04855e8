"""When the caller's turn is over: the words gathered, the verdict on the latest silence, the hold, the release.

TurnRelease is the deciding half of the TurnOwner (owner.py, which builds on it and routes the caller's
input here): it keeps the pending words (PendingTurn) and the finals still owed, asks the end-of-turn model
(verdict.py) or takes the recogniser's head's verdict, holds the turn for as long as policy.py's pure
functions say, prepares a reply as soon as the words are worth it, and releases the turn to the agent with
its `release` event (events.py). While words the caller already spoke are still being decoded, nothing is
released: a decision then would answer half of what was said.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from voicegate.internal.event_envelope import EventSink, NullSink
from voicegate.internal.llm.base import Turn
from voicegate.internal.turn.events import ReleaseEvent
from voicegate.internal.turn.fusion import NOT_ASKED, TurnFusion, cleanness
from voicegate.internal.turn.pauses import CallerPauses
from voicegate.internal.turn.pending import Decision, PendingTurn, Release, TurnTimes
from voicegate.internal.turn.policy import (
    VERDICT_WAIT_MS,
    fused_decision,
    text_rule_wait_ms,
    verdict_threshold,
    worth_preparing,
)
from voicegate.internal.turn.ports import EndOfTurnModel, Line, Replies
from voicegate.internal.turn.settings import FRAME_MS, TurnSettings
from voicegate.internal.turn.state import TurnState, TurnStep, Verdict, next_state
from voicegate.internal.turn.text_cues import opens_lead_in, says_it_goes_on
from voicegate.internal.turn.verdict import TURN_AUDIO_FRAMES, ModelQuestions, model_audio


class TurnRelease:
    def __init__(self, settings: TurnSettings, replies: Replies, line: Line, sample_rate: int, *,
                 model: EndOfTurnModel | None = None, fusion: TurnFusion | None = None,
                 prefetch: Callable[[str], None] | None = None,
                 intercept: Callable[[str, str], bool] = lambda text, keys: False,
                 recogniser_verdicts: bool = False, clock: Callable[[], float] = time.monotonic,
                 events: EventSink | None = None) -> None:
        self.settings = settings
        self.replies = replies
        self.line = line
        self.sample_rate = sample_rate
        self.model = model
        self._questions = (ModelQuestions(model, sample_rate, self._set_verdict, replies.stage)
                           if model is not None else None)
        self.fusion = fusion
        self._prefetch_words = prefetch
        self._intercept = intercept  # a turn that is not for the agent (the recording's consent answer)
        # The recogniser's finals carry the phone-band head's verdict (Transcript.end_of_turn): the sound of
        # the turn is judged by the decode itself, and the end-of-turn model is asked only when one lacks it.
        self.recogniser_verdicts = recogniser_verdicts
        self._clock = clock
        self.events: EventSink = events if events is not None else NullSink()  # release, overlap (events.py)
        self.state = TurnState.LISTENING  # the caller's side of the turn (state.py)
        self.pauses = CallerPauses()
        # The turn being gathered, and the verdict on its latest silence.
        self.pending: PendingTurn | None = None
        self.probability: float | None = None  # the fused verdict for the latest silence, once decided
        self.audio_probability: float | None = None  # the end-of-turn model's, for the latest silence
        self.verdict = Verdict.NONE
        self._silences = 0  # numbers the caller's silences, so a late verdict for an earlier one is ignored
        self._asked: int | None = None  # the silence whose verdict the words are waiting to judge
        self._timer: asyncio.TimerHandle | None = None
        self._awaiting = 0  # finals owed for speech the caller already finished
        # The caller's latest utterance.
        self._speech_ended_at = 0.0  # monotonic time the caller last stopped speaking (0: not yet)
        self._final_at = 0.0
        self.turn_audio: deque[tuple[bytes, bool]] = deque(maxlen=TURN_AUDIO_FRAMES)
        # The turn released last, while its reply can still be dropped for the caller going on with it.
        self.released: PendingTurn | None = None


    def _step(self, step: TurnStep) -> None:
        self.state = next_state(self.state, step)


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
        if self.verdict is not Verdict.OWED:
            return  # the model already answered (asked beside the decode)
        if fusion is not None and not fusion.needs_audio(pending.text, self.settings.threshold, self.line.snr_db):
            self._set_verdict(silence, NOT_ASKED)  # the words decide, whatever it would sound like
            return
        if self._questions is None or not self._questions.out or not self.settings.early_verdict:
            self._ask_model(silence)

    def _prefetch(self) -> None:
        if self._prefetch_words is not None and self.pending is not None:
            # Overlap retrieval with the hold; the turn reuses it when no more words arrive.
            self._prefetch_words(self.pending.text)

    # ---- the end-of-turn model ---------------------------------------------------------------------

    def _ask_model(self, silence: int) -> None:
        if self._questions is None:  # only the recogniser's head could have judged the sound, and it did not
            self._set_verdict(silence, None)
            return
        self._questions.ask(silence, model_audio(list(self.turn_audio), self.line.profile.offset_frames))

    def _set_verdict(self, silence: int, probability: float | None) -> None:
        """The model's P(complete) for silence number `silence` (None: it failed; the words decide)."""
        if silence != self._silences or self.state.speaking:
            return  # the caller spoke again since: that silence is no longer the question
        self.verdict = Verdict.NONE
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
        by_head = self.verdict is Verdict.HEAD
        if self.verdict is Verdict.OWED and (quiet or 0.0) < VERDICT_WAIT_MS:
            return None
        head = by_head and not says_it_goes_on(pending.text)
        sound = self.audio_probability if head or not by_head else None
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
        if pending is None or self.state.speaking or self._awaiting:
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
        self._announce_release(Turn(text=pending.text), pending.confidence, times,
                               Release(decision.reason, decision.probability, silence_ms))

    def _announce_release(self, turn: Turn, confidence: float | None, times: TurnTimes, release: Release) -> None:
        """The turn is the agent's to answer: say why (the `release` event), then hand it over."""
        probability = None if release.probability is None else round(release.probability, 3)
        self.events.emit(ReleaseEvent(reason=release.reason, probability=probability,
                                      silence_ms=round(release.silence_ms, 1)))
        self.replies.release(turn, confidence, times, release)

    # ---- a reply ready in time --------------------------------------------------------------------

    def _prepare_from_words(self) -> None:
        pending, fusion = self.pending, self.fusion
        if pending is not None and fusion is not None:
            if worth_preparing(fusion.probability(None, pending.text, self.line.snr_db), pending.text):
                self._prepare(pending)

    def _prepare(self, pending: PendingTurn) -> None:
        self.replies.prepare(pending.text, pending.confidence, TurnTimes(self._speech_ended_at, self._final_at))

