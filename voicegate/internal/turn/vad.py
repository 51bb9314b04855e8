"""Voice activity detection: is the caller speaking in this 20 ms frame? (The VAD's one home: the frame
classifiers here and Silero's in silero.py, and `build_vad`, which puts a call's detector together.)

The energy detector tracks each call's own noise floor, because a fixed threshold that works on a
quiet headset fails on a car phone. Speech is a frame louder than the floor by `threshold_db`;
an utterance starts after `onset` speech frames and ends after `offset` quiet frames. While the
agent is speaking, a faster onset profile makes barge-in feel immediate (internal/turn/bargein.py's
`vad_profile` says which; the pipeline applies it).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Protocol

import numpy as np

from voicegate.internal.audio.c_audioop import load_audioop

if TYPE_CHECKING:
    from voicegate.internal.turn.silero import SileroModel

FRAME_MS = 20
# Below this level a frame is silence whatever the floor says (digital silence, comfort noise).
ABSOLUTE_FLOOR_DBFS = -55.0
# The noise floor is the quietest frame of the last 1.5 s, and never below this.
FLOOR_WINDOW_FRAMES = 75
FLOOR_MIN_DBFS = -90.0
# Frames at the start of a call used only to learn the floor (phones often open with a click).
WARMUP_FRAMES = 5


class VadEvent(Enum):
    SPEECH_START = "speech_start"
    SPEECH_END = "speech_end"


@dataclass(frozen=True, slots=True)
class VadProfile:
    onset_ms: int
    offset_ms: int

    @property
    def onset_frames(self) -> int:
        return max(1, self.onset_ms // FRAME_MS)

    @property
    def offset_frames(self) -> int:
        return max(1, self.offset_ms // FRAME_MS)


_audioop = load_audioop()
# Samples widened to 32 bits (x << 16) make audioop's integer RMS exact to 1/65536 of a sample step.
_RMS_SCALE = 1.0 / 65536.0


def frame_level_dbfs(pcm: bytes) -> float:
    """RMS level of PCM16 samples in dB relative to full scale (-inf for digital silence -> -120)."""
    if _audioop is not None and not len(pcm) % 2:
        # Every frame of every call comes here: audioop's C loop costs 0.6 us against 2.4 us for numpy's
        # frombuffer/astype/dot call overhead on 160 samples. audioop.rms truncates to an integer, hence
        # the widening: the result is the exact RMS to within 1e-5 of a sample step (numpy's float32 sum
        # was less exact than that).
        if not pcm:
            return -120.0
        rms = _audioop.rms(_audioop.lin2lin(pcm, 2, 4), 4) * _RMS_SCALE
        energy = rms * rms
    else:
        samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float32)
        if samples.size == 0:
            return -120.0
        energy = float(np.dot(samples, samples)) / samples.size
    if energy <= 1.0:
        return -120.0
    return 10.0 * math.log10(energy / (32768.0 * 32768.0))


class FrameClassifier(Protocol):
    def is_speech(self, pcm: bytes) -> bool: ...


class AdaptiveEnergyClassifier:
    """Speech = louder than this call's noise floor by `threshold_db`.

    The floor is the quietest frame of the last `FLOOR_WINDOW_FRAMES` (minimum statistics): speech
    always has pauses between words, steady noise does not, so the minimum follows the noise and not
    the voice, up when a car starts and down when it stops, without ever locking onto speech.
    """

    def __init__(self, threshold_db: float) -> None:
        self.threshold_db = threshold_db
        self.level_db = -120.0
        self._frames = 0  # frames classified so far
        # The window's minimum, kept as it slides (a monotonic queue): the frame numbers and levels of
        # the frames that can still become the minimum, levels rising from the front. The front is the
        # floor. `min()` over the whole 75-frame window on every frame cost ~1.3 us; this is O(1).
        self._candidates: deque[tuple[int, float]] = deque()

    @property
    def floor_db(self) -> float:
        return max(self._candidates[0][1], FLOOR_MIN_DBFS) if self._candidates else FLOOR_MIN_DBFS

    def is_speech(self, pcm: bytes) -> bool:
        level = frame_level_dbfs(pcm)
        self.level_db = level
        frame = self._frames
        self._frames = frame + 1
        candidates = self._candidates
        while candidates and candidates[-1][1] >= level:
            candidates.pop()  # louder than this newer frame: can never be the window's minimum again
        candidates.append((frame, level))
        if candidates[0][0] <= frame - FLOOR_WINDOW_FRAMES:
            candidates.popleft()  # slid out of the window (at most one per frame: one frame came in)
        if frame < WARMUP_FRAMES:
            return False
        floor = candidates[0][1]
        if floor < FLOOR_MIN_DBFS:
            floor = FLOOR_MIN_DBFS
        return level > max(floor + self.threshold_db, ABSOLUTE_FLOOR_DBFS)


class WebRtcClassifier:
    """Google's WebRTC VAD (webrtcvad-wheels): better in babble noise, 8/16 kHz, 20 ms frames."""

    def __init__(self, sample_rate: int, aggressiveness: int = 2) -> None:
        import webrtcvad

        self._vad = webrtcvad.Vad(aggressiveness)
        self._rate = sample_rate
        self.energy = AdaptiveEnergyClassifier(6.0)

    def is_speech(self, pcm: bytes) -> bool:
        # The energy gate stops webrtcvad's known false positives on very quiet line noise.
        loud_enough = self.energy.is_speech(pcm) or frame_level_dbfs(pcm) > -35.0
        return loud_enough and bool(self._vad.is_speech(pcm, self._rate))


# The background's swing over its floor (dB): an exponential mean over the frames the gate keeps closed,
# each capped (a word the gate missed must not teach it that the background is loud).
SWING_FRAMES = 50  # about a second
SWING_CAP_DB = 8.0
SWING_START_DB = 4.0  # before the line has been heard: a middling background
# Staying open takes the background's swing times this plus a margin, within [MIN_HOLD_DB, threshold].
SWING_FACTOR = 1.5
HOLD_MARGIN_DB = 1.5
MIN_HOLD_DB = 3.0
# A gap between words: the gate stays open this long after the caller's last frame over the hold
# threshold, and Silero (which still hears the voice there) decides. 200 ms: the gaps inside a sentence.
BRIDGE_FRAMES = 10
# Voices behind the caller: Silero's mean probability on background frames (100 ms or more below the
# opening threshold, past Silero's own hangover), over about a quarter of a second, above
# BACKGROUND_VOICE_P. It starts at 1: until the line's background has been heard to hold no voices, the
# gate is the plain one (a call's first words, and a line with voices behind, lose nothing to the bridge).
BACKGROUND_VOICE_FRAMES = 12
BACKGROUND_AFTER_FRAMES = 5
BACKGROUND_VOICE_P = 0.5
BACKGROUND_VOICE_START = 1.0
# A frame more than this below the caller's speech level does not keep the gate open (another voice).
CALLER_RANGE_DB = 10.0
# Voices behind the caller (a cafe, a TV, an office) are told from the caller by level over a tenth of a
# second: four voices summed are steady at that scale, while the caller's syllables stand well over them.
# The caller's level is the peak of that short-term level, easing down 0.25 dB a second; a stretch more than
# VOICES_RANGE_DB under it is not the caller's. Measured at 15 dB below the caller: the babble's 100 ms
# level stays 16+ dB under the caller's peak, the caller's syllables within 12.
SHORT_TERM_FRAMES = 5
VOICES_RANGE_DB = 15.0
PEAK_EASE_DB = 0.005  # per frame: 0.25 dB a second
# Silero does not always hear a babble of several voices as voices (its mean on the background stayed under
# BACKGROUND_VOICE_P on half the held-out babble lines): on any line whose floor is within this of the
# caller's peak (a noisy line), a loud stretch far under the caller is not theirs either. On a clean line
# (the floor 35 dB or more under the caller) nothing is turned away: a caller's soft last word stays theirs.
NOISY_SPAN_DB = 35.0


class NoiseAwareGate:
    """`is_speech(pcm)`: is this frame loud enough to be the caller, on this line? (Silero's gate)

    Silero tells a voice from noise; the gate tells the caller from the background by level (the caller is
    close to the microphone). The plain gate asks every frame to stand `threshold_db` over the noise floor.
    On a noisy line that cuts the caller's sentences: the gaps between words fall to the noise floor, and
    at 15 dB speech-active SNR so do the quieter sounds, so an utterance ended inside four finished
    sentences in five (bench/common/noises.py white noise, tuning set), though Silero alone still heard one voice.

    So, once the background has been heard to hold no voices (Silero's verdict on it):
    - **to open**, a frame stands `threshold_db` over the floor, as before;
    - **to stay open**, it stands only as far over the floor as the background itself swings (a few dB for
      hiss, hum or traffic), and gaps of up to BRIDGE_FRAMES between such frames are bridged: Silero,
      which hears the voice through the noise, decides where the utterance ends;
    - only frames within CALLER_RANGE_DB of the caller's own speech level (once known) keep it open.
    Until then, and whenever Silero hears voices in the background (babble: other people, quieter than the
    caller), the gate is the plain one: every frame must stand `threshold_db` over the floor. Bridging the
    gaps there kept the caller's last utterance open on the babble (measured: 11 of 36 finished sentences
    still open 4 s later at 15 dB, against 1).

    Limits (docs/speech.md, "Noisy lines"): babble is told from the caller only by level (the plain gate),
    so babble within ~10 dB of the caller opens and extends utterances as before; the background must be
    heard for a moment (the greeting, the first pause) before the bridge is used; loud pink-like noise,
    which Silero half hears as a voice, keeps the plain gate.
    """

    def __init__(self, meter: AdaptiveEnergyClassifier) -> None:
        self.meter = meter
        self.open = False
        self.swing_db = SWING_START_DB
        self.caller_db: float | None = None  # the caller's speech level (the VAD sets it)
        self.background_voice = BACKGROUND_VOICE_START  # Silero's mean probability on the background's frames
        self._since_caller = BRIDGE_FRAMES + 1  # frames since the last one like the caller's
        self._quiet_run = 0  # frames in a row below the opening threshold
        self._recent: deque[float] = deque(maxlen=SHORT_TERM_FRAMES)  # the last frames' powers
        self.peak_db: float | None = None  # the loudest short-term level of a voice heard lately (the caller's)
        self._since_peak_caller = BRIDGE_FRAMES + 1

    @property
    def level_db(self) -> float:
        return self.meter.level_db

    @property
    def floor_db(self) -> float:
        return self.meter.floor_db

    @property
    def voices_behind(self) -> bool:
        return self.background_voice > BACKGROUND_VOICE_P

    @property
    def hold_db(self) -> float:
        """How far over the floor a frame must stand to keep the gate open."""
        if self.voices_behind:
            return self.meter.threshold_db
        return min(self.meter.threshold_db, max(MIN_HOLD_DB, SWING_FACTOR * self.swing_db + HOLD_MARGIN_DB))

    def heard_voice(self, probability: float) -> None:
        """Silero's probability for the frame just judged (SileroClassifier calls this after the gate)."""
        if self._quiet_run >= BACKGROUND_AFTER_FRAMES:
            self.background_voice += (probability - self.background_voice) / BACKGROUND_VOICE_FRAMES

    def _like_caller(self, level: float) -> bool:
        return self.caller_db is None or level > self.caller_db - CALLER_RANGE_DB

    def short_term_db(self, level: float) -> float:
        """The mean level of the last SHORT_TERM_FRAMES frames (power, back in dB), this one included."""
        self._recent.append(10.0 ** (level / 10.0))
        return 10.0 * math.log10(sum(self._recent) / len(self._recent))

    def _behind_caller(self, loud: bool, level: float) -> bool:
        """Is this loud frame one of the voices behind the caller rather than the caller (with voices behind, or
        on a noisy line)?
        A frame counts as the caller's while the short-term level is within VOICES_RANGE_DB of the caller's
        peak, and for BRIDGE_FRAMES after (the gaps inside a word); past that, loud frames are the others."""
        short = self.short_term_db(level)
        if loud:
            self.peak_db = short if self.peak_db is None or short > self.peak_db else self.peak_db - PEAK_EASE_DB
        elif self.peak_db is not None:
            self.peak_db -= PEAK_EASE_DB
        if self.peak_db is not None and short > self.peak_db - VOICES_RANGE_DB:
            self._since_peak_caller = 0
        else:
            self._since_peak_caller += 1
        noisy = self.peak_db is not None and self.peak_db - self.meter.floor_db < NOISY_SPAN_DB
        return loud and (self.voices_behind or noisy) and self._since_peak_caller > BRIDGE_FRAMES

    def is_speech(self, pcm: bytes) -> bool:
        loud = self.meter.is_speech(pcm)  # the meter sees every frame: it follows the floor
        level = self.meter.level_db
        over = level - self.meter.floor_db
        behind = self._behind_caller(loud, level)
        if behind:
            # Other people talking behind the caller stand over the floor as a voice would, but well under
            # the caller, who is close to the microphone: they neither open nor hold an utterance (they kept
            # finished turns open for good: 10 of 12 unanswered with four voices 15 dB below the caller).
            loud = False
        self._quiet_run = 0 if loud else self._quiet_run + 1
        # Never stricter than the plain gate (a loud frame is always let through); only the bridge is new.
        caller = over > self.hold_db and level > ABSOLUTE_FLOOR_DBFS and self._like_caller(level) and not behind
        self._since_caller = 0 if caller else self._since_caller + 1
        bridge = 0 if self.voices_behind else BRIDGE_FRAMES
        self.open = loud or (self.open and self._since_caller <= bridge and level > ABSOLUTE_FLOOR_DBFS)
        if not loud and not self.open:
            self.swing_db += (min(over, SWING_CAP_DB) - self.swing_db) / SWING_FRAMES
        return self.open


# The caller's speech level is a running mean over this many voiced frames (in dB), about a second.
SPEECH_LEVEL_FRAMES = 50
MAX_SNR_DB = 60.0


class VoiceActivityDetector:
    """Turns per-frame speech decisions into utterance start/end events with hysteresis.

    With an energy meter (the energy classifier itself, or the one gating Silero or webrtcvad) it also
    estimates the line's signal-to-noise ratio: the caller's recent speech level over the noise floor. The
    end-of-turn fusion trusts the sound of the last words less on a noisy line (internal/turn/fusion.py).
    """

    def __init__(self, classifier: FrameClassifier, profile: VadProfile,
                 meter: AdaptiveEnergyClassifier | NoiseAwareGate | None = None) -> None:
        self.classifier = classifier
        self.profile = profile
        self.meter = meter
        self.speaking = False
        self.voiced = False  # the last frame itself sounded like speech (speaking includes the hangover)
        self._run = 0  # consecutive frames disagreeing with the current state
        self._speech_db: float | None = None

    @property
    def snr_db(self) -> float | None:
        """The caller's speech over the line's noise, in dB (None: no meter, or no speech heard yet)."""
        if self.meter is None or self._speech_db is None:
            return None
        return max(0.0, min(MAX_SNR_DB, self._speech_db - self.meter.floor_db))

    def process(self, pcm: bytes) -> VadEvent | None:
        speech = self.classifier.is_speech(pcm)
        self.voiced = speech
        if speech and self.meter is not None:
            level = self.meter.level_db
            self._speech_db = level if self._speech_db is None else (
                self._speech_db + (level - self._speech_db) / SPEECH_LEVEL_FRAMES)
            if isinstance(self.meter, NoiseAwareGate):
                self.meter.caller_db = self._speech_db
        if speech == self.speaking:
            self._run = 0
            return None
        self._run += 1
        needed = self.profile.offset_frames if self.speaking else self.profile.onset_frames
        if self._run < needed:
            return None
        self._run = 0
        self.speaking = speech
        return VadEvent.SPEECH_START if speech else VadEvent.SPEECH_END


def build_vad(kind: str, sample_rate: int, profile: VadProfile, *, threshold_db: float,
              silero: SileroModel | None = None, silero_threshold: float = 0.5,
              noise_gate: bool = True) -> VoiceActivityDetector:
    """A call's detector for `pipeline.vad` (`kind`: silero, webrtc or energy). Silero runs only when its
    shared model was loaded; without it the energy classifier decides (as /health reports)."""
    energy = AdaptiveEnergyClassifier(threshold_db)
    meter: AdaptiveEnergyClassifier | NoiseAwareGate = energy
    classifier: FrameClassifier
    if kind == "silero" and silero is not None:
        from voicegate.internal.turn.silero import SileroClassifier

        if noise_gate:  # the level gate that follows the line's noise
            meter = NoiseAwareGate(energy)
        classifier = SileroClassifier(sample_rate, silero, silero_threshold, gate=meter)
    elif kind == "webrtc":
        classifier = WebRtcClassifier(sample_rate)
        meter = classifier.energy
    else:
        classifier = meter
    return VoiceActivityDetector(classifier, profile, meter)
