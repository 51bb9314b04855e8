"""Has the caller finished, and what if they had not? The pipeline's side of turn-taking.

- **The sound of the turn**: the caller's last 8 s of audio, kept frame by frame, is what Smart Turn
  hears at a silence (with its inner pauses shortened and 100 ms of the silence). It is asked only once
  the words are in, and only when they leave the turn open (`TurnFusion.needs_audio`): half a decode
  of CPU saved wherever "a table for" or "where is my parcel?" already says it all.
- **A reply ready in time**: as soon as the words are in, the reply is prepared (responder.py), so the
  decision and the reply's synthesis overlap.
- **Going on after a release**: speech soon after a turn was released holds the reply at once; if the
  words add to the turn, the reply is dropped and the whole sentence is pending again (`took_back`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from internal.pipeline.bargein import is_backchannel
from internal.pipeline.responder import Responder, TurnTimes
from internal.pipeline.services import PipelineServices
from internal.pipeline.turn_reply import added_words
from internal.pipeline.turns import PendingTurn, TurnBuffer
from internal.pipeline.vad import VoiceActivityDetector
from internal.stt.base import Transcript
from internal.turn.fusion import NOT_ASKED
from internal.turn.smart_turn import without_long_pauses
from internal.turn.text_cues import ends_dictation, ends_incomplete

log = logging.getLogger(__name__)

TURN_AUDIO_FRAMES = 400  # 8 s of 20 ms frames: what Smart Turn hears
END_OF_TURN_SILENCE_MS = 100  # the silence after the last word that Smart Turn hears
# A reply is prepared only for turns at least this likely to be finished: one that surely goes on ("a table
# for") would only be thrown away.
PREPARE_FLOOR = 0.2


class Endpointing:
    def __init__(self, services: PipelineServices, turns: TurnBuffer, responder: Responder,
                 vad: VoiceActivityDetector, sample_rate: int, backchannels: frozenset[str],
                 times: Callable[[], TurnTimes]) -> None:
        self.services = services
        self.turns = turns
        self.responder = responder
        self.vad = vad
        self.sample_rate = sample_rate
        self.backchannels = backchannels
        self._times = times  # the moments of the turn so far (speech ended, final), for a prepared reply
        # The caller's audio of the turn in progress, (pcm, voiced) per frame.
        self.turn_audio: deque[tuple[bytes, bool]] = deque(maxlen=TURN_AUDIO_FRAMES)
        self._verdict_task: asyncio.Task[None] | None = None
        self._verdict_audio: tuple[int, bytes] | None = None  # (silence, what Smart Turn would hear)
        # The turn released last, while its reply can still be dropped for the caller going on with it.
        self.released: PendingTurn | None = None
        self.continuing = False  # the caller spoke right after a release: are they going on?

    def close(self) -> None:
        if self._verdict_task is not None:
            self._verdict_task.cancel()

    # ---- the sound of the turn ---------------------------------------------------------------------

    def hear(self, pcm: bytes, voiced: bool) -> None:
        if self.services.turn_model is not None:
            self.turn_audio.append((pcm, voiced))

    def new_turn(self, keep_frames: int) -> None:
        """Forget the audio of earlier turns (keep the pre-roll and onset frames of this one)."""
        while len(self.turn_audio) > keep_frames:
            self.turn_audio.popleft()

    def speech_started(self) -> bool:
        """The caller started speaking; True when that may be the rest of the turn just released (its reply
        is held, within this frame, until the words tell; nothing of it plays over the caller meanwhile)."""
        self._verdict_audio = None
        self.continuing = self.released is not None and self.responder.absorbable()
        if self.continuing:
            self.responder.hold()
        else:
            self.released = None
        return self.continuing

    def silence(self, silence: int, ask: bool, offset_frames: int, final_owed: bool) -> None:
        """The caller fell silent (silence number `silence`): keep what Smart Turn would hear of it."""
        if not ask:
            return
        if self._verdict_task is not None:
            self._verdict_task.cancel()
        # Measured on a neural voice: past ~150 ms of silence, unfinished sentences start to sound "complete".
        extra = max(0, offset_frames - END_OF_TURN_SILENCE_MS // 20)
        frames = list(self.turn_audio)
        self._verdict_audio = (silence, without_long_pauses(frames[:len(frames) - extra] if extra else frames))
        if not final_owed:
            self.words_in(awaiting=False)

    def words_in(self, awaiting: bool) -> None:
        """The words for the latest silence are in: prepare the reply, ask Smart Turn if they leave it open."""
        if awaiting:
            return
        self.prepare_from_words()
        if self._verdict_audio is None:
            return
        (silence, audio), self._verdict_audio = self._verdict_audio, None
        pending, fusion = self.turns.pending, self.services.turn_fusion
        if pending is None:
            self.turns.set_verdict(silence, None)  # no words at all: the text rules' weights decide
            return
        if fusion is not None and not fusion.needs_audio(pending.text, self.turns.threshold, self.vad.snr_db):
            self.turns.set_verdict(silence, NOT_ASKED)  # the words decide, whatever it would sound like
            return
        self._verdict_task = asyncio.create_task(self._ask(silence, audio), name="end-of-turn")

    async def _ask(self, silence: int, audio: bytes) -> None:
        """Smart Turn's verdict on the audio up to this silence, handed to the turn buffer."""
        model = self.services.turn_model
        assert model is not None
        asked = asyncio.get_running_loop().time()
        try:
            probability = await model.predict(audio, self.sample_rate)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("end-of-turn model failed; the words decide this turn")
            probability = None
        if probability is not None:  # None: failed, or the model's pool was full
            self.responder.timing("end_of_turn_model", (asyncio.get_running_loop().time() - asked) * 1000.0,
                                  self.responder.session.conversation.turns + 1)
        self.turns.set_verdict(silence, probability)

    # ---- a reply ready in time ---------------------------------------------------------------------

    def prepare_from_words(self) -> None:
        pending, fusion = self.turns.pending, self.services.turn_fusion
        if pending is not None and fusion is not None:
            if fusion.probability(None, pending.text, self.vad.snr_db) >= PREPARE_FLOOR:
                self.responder.prepare(pending.text, pending.confidence, self._times())

    def decided(self, pending: PendingTurn, probability: float | None) -> None:
        """The turn's hold is decided (TurnBuffer.on_decision): make sure its reply is on its way."""
        if probability is None:  # the text rules: not for words they hold longer ("I want to", "... 555")
            likely = not (ends_incomplete(pending.text) or ends_dictation(pending.text))
        else:
            likely = probability >= PREPARE_FLOOR
        if likely:
            self.responder.prepare(pending.text, pending.confidence, self._times())

    # ---- going on after a release ------------------------------------------------------------------

    def took_back(self, text: str, transcript: Transcript) -> bool:
        """The caller spoke right after a release (the reply is held): did they go on with their sentence?

        Yes: the reply is dropped (or, if it had begun, stays stopped) and the released turn, with what
        they added, is pending again, to be answered once as a whole; True. Only noise or "mm": the reply
        plays on; True. Too late to take the reply back (a tool with side effects ran meanwhile): False,
        and what they said is a turn of its own.
        """
        self.continuing = False
        released, self.released = self.released, None
        if released is None:
            self.responder.resume()
            return False
        added = added_words(released.text, text) if transcript.whole_turn else text.split()
        if not added or is_backchannel(" ".join(added), self.backchannels):
            self.responder.resume()
            self.turns.add_final("")
            return True
        if not self.responder.absorb():
            return False
        self.turns.restore(released)
        self.turns.add_final(text, transcript.confidence, replace=transcript.whole_turn)
        return True

    def end_continuation(self) -> None:
        """No words are coming for the speech after a release: the held reply plays on."""
        if self.continuing:
            self.continuing = False
            self.released = None
            self.responder.resume()
