"""What the turn policy sees at each of the caller's silences, computed once per dialogue, offline.

The pipeline decides at each end of an utterance (the VAD's `vad_offset_ms` of quiet) from two signals:
Smart Turn's probability for the turn's audio so far (with 100 ms of the silence) and the whole turn's
transcript so far (Whisper re-hears the turn at each pause). This module replays a dialogue's audio
through the same VAD (Silero gated by the energy detector, 20 ms frames), cuts the same audio at each end
of utterance, and records both signals with what they cost. A policy is then a pure function of these
records (bench/turns/turn_taking.py sweeps thresholds and waits over them in milliseconds, not in real time), and the
training script fits the fusion weights on the same records of other sentences.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.turns.cases import Dialogue

FRAME_MS = 20
PRE_ROLL_FRAMES = 15  # internal/pipeline/pipeline.py PRE_ROLL_MS
TURN_AUDIO_FRAMES = 400  # what Smart Turn hears: the last 8 s
HEARD_SILENCE_FRAMES = 5  # Smart Turn hears 100 ms of the silence after the last word


@dataclass(frozen=True, slots=True)
class DecisionPoint:
    end_s: float  # the VAD's end of utterance (from the start of the dialogue)
    resume_s: float | None  # the next start of speech as the VAD declares it (None: nothing follows)
    resume_voice_s: float | None  # where that speech really begins (the first voiced frame)
    final: bool  # the caller's turn really is over here (no speech of the caller follows)
    text: str  # the whole turn's transcript so far
    audio_p: float  # Smart Turn's P(complete)
    decode_ms: float  # what the transcript cost (CPU time, one core)
    smart_turn_ms: float
    snr_db: float | None = None  # the line's SNR as the VAD estimated it at this point


@dataclass
class DialogueSignals:
    kind: str
    text: str
    voice: str
    rate: int
    noise: str
    pause_s: float
    speech_end_s: float
    pause_at_s: float
    points: list[DecisionPoint] = field(default_factory=list)
    vad_ms: float = 0.0  # Silero's CPU for the whole dialogue
    audio_s: float = 0.0


# ---- one worker process's models -----------------------------------------------------------------

_models: dict[str, Any] = {}


def _init(whisper: dict[str, Any] | None = None) -> None:
    """Load the models; `whisper`: [whisper] settings other than the defaults (bench/turns/turn_taking.py --whisper)."""
    import tempfile

    from voicegate.internal.config.providers import WhisperConfig
    from voicegate.internal.stt.whisper import decode_settings
    from voicegate.internal.stt.whisper_decode import WhisperDecoder
    from voicegate.internal.stt.whisper_models import resolve_model
    from voicegate.internal.turn.silero import shared_silero
    from voicegate.internal.turn.smart_turn import SmartTurnModel
    from voicegate.internal.turn.weights import smart_turn_path

    config = WhisperConfig(**(whisper or {}))
    with tempfile.TemporaryDirectory() as work:
        model = resolve_model(config.model, Path(work))
    _models["whisper"] = WhisperDecoder(decode_settings(config, model))
    _models["silero"] = shared_silero()
    _models["smart_turn"] = SmartTurnModel(smart_turn_path("", download=False))


def _extract(task: tuple[Dialogue, int, str, int, int, bool]) -> DialogueSignals:
    dialogue, rate, noise, seed, offset_ms, noise_gate = task
    if not _models:
        _init()
    return extract(dialogue, rate, noise, seed, offset_ms, noise_gate)


def extract(dialogue: Dialogue, rate: int, noise: str, seed: int, offset_ms: int,
            noise_gate: bool = True) -> DialogueSignals:
    """Replay one dialogue through the VAD and record both signals at each end of utterance. `noise_gate`:
    Silero behind the noise-aware level gate (pipeline.vad_noise_gate, the default), else the plain one."""
    from voicegate.internal.audio.frame import frame_bytes
    from voicegate.internal.stt.whisper_decode import to_model_audio
    from voicegate.internal.turn.silero import SileroClassifier
    from voicegate.internal.turn.smart_turn import without_long_pauses
    from voicegate.internal.turn.vad import (
        AdaptiveEnergyClassifier,
        NoiseAwareGate,
        VadEvent,
        VadProfile,
        VoiceActivityDetector,
    )

    audio = dialogue.audio(rate, noise, seed)
    size = frame_bytes(rate)
    frames = [audio[i:i + size] for i in range(0, len(audio) - size + 1, size)]
    energy = AdaptiveEnergyClassifier(9.0)
    gate: AdaptiveEnergyClassifier | NoiseAwareGate = NoiseAwareGate(energy) if noise_gate else energy
    classifier = SileroClassifier(rate, _models["silero"], 0.5, gate=gate)
    vad = VoiceActivityDetector(classifier, VadProfile(60, offset_ms), gate)
    events: list[tuple[str, int]] = []  # ("start"|"end", frame index)
    voiced: list[bool] = []
    snr: list[float | None] = []
    started = time.process_time()
    for index, pcm in enumerate(frames):
        event = vad.process(pcm)
        voiced.append(vad.voiced)
        snr.append(vad.snr_db)
        if event is VadEvent.SPEECH_START:
            events.append(("start", index))
        elif event is VadEvent.SPEECH_END:
            events.append(("end", index))
    vad_ms = (time.process_time() - started) * 1000.0
    signals = DialogueSignals(dialogue.kind, dialogue.text, dialogue.voice, rate, noise, dialogue.pause_s,
                              dialogue.speech_end_s, dialogue.pause_at_s, vad_ms=vad_ms,
                              audio_s=len(frames) * FRAME_MS / 1000)
    starts = [i for kind, i in events if kind == "start"]
    ends = [i for kind, i in events if kind == "end"]
    turn_utterances: list[bytes] = []
    turn_audio: deque[tuple[bytes, bool]] = deque(maxlen=TURN_AUDIO_FRAMES)
    offset_frames = max(1, offset_ms // FRAME_MS)
    turn_start = starts[0] - PRE_ROLL_FRAMES - 3 if starts else 0
    for number, (start, end) in enumerate(zip(starts, ends, strict=False)):
        first = max(0, start - PRE_ROLL_FRAMES)
        turn_utterances.append(b"".join(frames[first:end]))
        turn_audio.clear()
        turn_audio.extend(zip(frames[max(0, turn_start):end], voiced[max(0, turn_start):end], strict=True))
        extra = max(0, offset_frames - HEARD_SILENCE_FRAMES)
        heard = list(turn_audio)
        # CPU time, not wall time: what each costs on an idle core, whatever else this machine is doing.
        t0 = time.process_time()
        text = _models["whisper"].decode(to_model_audio(b"".join(turn_utterances), rate)).text
        decode_ms = (time.process_time() - t0) * 1000.0
        t0 = time.process_time()
        audio_p = _models["smart_turn"].probability(without_long_pauses(heard[:len(heard) - extra] if extra else heard),
                                                    rate)
        smart_turn_ms = (time.process_time() - t0) * 1000.0
        following = starts[number + 1] if number + 1 < len(starts) else None
        onset = None
        if following is not None:
            onset = next((i for i in range(end, following + 1) if voiced[i]), following)
        final = following is None or following * FRAME_MS / 1000 > dialogue.speech_end_s + 0.5
        signals.points.append(DecisionPoint(
            end_s=(end + 1) * FRAME_MS / 1000,
            resume_s=None if following is None else following * FRAME_MS / 1000,
            resume_voice_s=None if onset is None else onset * FRAME_MS / 1000,
            final=final, text=text, audio_p=audio_p, decode_ms=decode_ms, smart_turn_ms=smart_turn_ms,
            snr_db=snr[end]))
        if final:
            break
    return signals


def extract_all(dialogues: list[Dialogue], rate: int, noise: str, offset_ms: int, workers: int = 2,
                noise_gate: bool = True, whisper: dict[str, Any] | None = None,
                progress: Callable[[int, int], None] = lambda done, total: None) -> list[DialogueSignals]:
    """`extract` for every dialogue, on `workers` processes (each loads its own models once)."""
    tasks = [(d, rate, noise, index, offset_ms, noise_gate) for index, d in enumerate(dialogues)]
    out: list[DialogueSignals] = []
    with ProcessPoolExecutor(max_workers=workers, initializer=_init, initargs=(whisper,)) as pool:
        for signals in pool.map(_extract, tasks, chunksize=4):
            out.append(signals)
            progress(len(out), len(tasks))
    return out
