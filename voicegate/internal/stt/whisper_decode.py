"""Whisper decoding inside a worker process (faster-whisper's CTranslate2 model, called directly).

Whisper was trained on 30 s windows and faster-whisper pads every utterance to one, so a two-second
"yes please" cost ~0.85 s of CPU on tiny.en here, whatever its length. CTranslate2's encoder accepts a
shorter window, and the whole decode's cost falls with it. Too short a window makes Whisper repeat
itself (measured on 20 support-line sentences through G.711: a 5 s window 26 % word errors, 8 s 9 %,
10 s 1.7 %, the same as the full 30 s window, at ~0.31 s CPU against ~1.0 s), so the window is the
utterance plus a margin of silence, at least 10 s. A short-window result that still looks unreliable
(low average log-probability, or text that repeats itself) is decoded again in the full window: the
extra cost is paid only where it is needed.

A noisy line (the utterance's own SNR estimate, internal/audio/line_noise.py, under `noisy_snr_db`) is
decoded with a wider beam (`noisy_beam_size`): on held-out noisy speech through G.711 beam search cut
word errors by a few points where greedy decoding took the first plausible word the noise left, at a
fraction more CPU, paid only by noisy utterances (docs/performance.md, "Offline speech in noise").
"""

from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from voicegate.internal.audio.line_noise import estimate_snr_db
from voicegate.internal.stt.workers import watch_parent

if TYPE_CHECKING:
    from voicegate.internal.stt.phone_turn import PhoneTurnHead

MODEL_RATE = 16000
FRAMES_PER_S = 100  # Whisper's features: one frame per 10 ms
FULL_WINDOW_FRAMES = 3000
WINDOW_MARGIN_S = 6.0  # silence after the utterance inside the window (less made Whisper repeat itself)
MIN_WINDOW_S = 10
MAX_TOKENS = 448  # Whisper's text context
TOKENS_PER_S = 8  # ample for speech (~4 tokens a second); a runaway repetition is cut off here
PROMPT_TOKENS = 223  # Whisper keeps at most half its text context for the previous-text prompt
# Whisper's own thresholds (openai/whisper transcribe.py): below this average log-probability or above
# this compression ratio a decode is not trusted; a high no-speech probability with a low log-probability
# means there were no words at all.
LOGPROB_FLOOR = -1.0
COMPRESSION_CEILING = 2.4
NO_SPEECH_THRESHOLD = 0.6


@dataclass(frozen=True, slots=True)
class DecodeSettings:
    """What a worker needs to load and run the model (pickled into each worker)."""

    model_dir: str
    compute_type: str
    cpu_threads: int
    beam_size: int
    language: str
    vad_filter: bool
    short_window: bool
    vocabulary: str  # the deployer's initial prompt and hotwords, as one previous-text prompt
    device: str = "cpu"  # CTranslate2's device, resolved from whisper.device (internal/devices.py)
    noisy_snr_db: float = 0.0  # an utterance whose estimated SNR is below this is noisy (0: none is)
    noisy_beam_size: int = 0  # the beam for a noisy utterance (0: beam_size)
    end_of_turn_head: bool = True  # also score the phone-band end-of-turn head (Decoded.end_of_turn)

    def beam_for(self, snr_db: float) -> int:
        """Greedy (or the configured beam) on a clean line, the wider beam on a noisy one."""
        if self.noisy_beam_size and snr_db < self.noisy_snr_db:
            return self.noisy_beam_size
        return self.beam_size


@dataclass(frozen=True, slots=True)
class Decoded:
    text: str
    avg_logprob: float
    no_speech_prob: float
    window_frames: int
    retried: bool = False
    snr_db: float | None = None  # the utterance's estimated SNR (None: not measured)
    # P(the caller's turn is finished) from the phone-band end-of-turn head (internal/stt/phone_turn.py) on
    # this decode's own encoder states: the turn's audio as heard so far. None: not computed (no speech).
    end_of_turn: float | None = None


def cpu_device() -> Any:
    import ctranslate2

    return ctranslate2.Device.cpu


def window_frames(duration_s: float, short_window: bool) -> int:
    """Feature frames to encode for an utterance of `duration_s` seconds."""
    if not short_window:
        return FULL_WINDOW_FRAMES
    seconds = max(MIN_WINDOW_S, math.ceil(duration_s + WINDOW_MARGIN_S))
    return min(FULL_WINDOW_FRAMES, seconds * FRAMES_PER_S)


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def repeats_itself(text: str) -> bool:
    """The text is a phrase followed by (part of) itself again: Whisper's failure in a short window.

    "Repeat after me." came back as the phrase four times in a 10 s window and once in a 15 s one; the
    compression ratio of such short text stays under Whisper's ceiling, so it is caught here. A caller
    who really said "yes, yes" pays one full-window decode and still gets "yes, yes".
    """
    words = re.findall(r"[a-z0-9']+", text.lower())
    for period in range(1, len(words)):
        rest = words[period:]  # at least half the phrase again: "... on my account. I need" is not a repeat
        if len(rest) >= (period + 1) // 2 and all(word == words[i % period] for i, word in enumerate(rest)):
            return True
    return False


def unreliable(decoded: Decoded) -> bool:
    return (decoded.avg_logprob < LOGPROB_FLOOR or compression_ratio(decoded.text) > COMPRESSION_CEILING
            or repeats_itself(decoded.text))


def no_words(decoded: Decoded) -> bool:
    return decoded.no_speech_prob > NO_SPEECH_THRESHOLD and decoded.avg_logprob < LOGPROB_FLOOR


def to_model_audio(pcm: bytes, sample_rate: int) -> np.ndarray:
    if sample_rate != MODEL_RATE:
        from voicegate.internal.audio.resample import resample

        pcm = resample(pcm, sample_rate, MODEL_RATE)
    return np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768.0


class WhisperDecoder:
    """One loaded model and its tokenizer; `decode` turns 16 kHz float audio into text."""

    def __init__(self, settings: DecodeSettings) -> None:
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        self.settings = settings
        self.model = WhisperModel(settings.model_dir, device=settings.device, compute_type=settings.compute_type,
                                  cpu_threads=settings.cpu_threads, num_workers=1)
        multilingual = bool(self.model.model.is_multilingual)
        language = settings.language if multilingual else "en"
        self.tokenizer = Tokenizer(self.model.hf_tokenizer, multilingual, task="transcribe",
                                   language=language or "en")
        self.suppressed = list(get_suppressed_tokens(self.tokenizer, [-1]))
        self.prompt = self.prompt_for("")
        self.turn_head: PhoneTurnHead | None = None
        if settings.end_of_turn_head:  # a missing or changed weights file is refused here, with its reason
            from voicegate.internal.stt.phone_turn import shared_head

            self.turn_head = shared_head()

    def prompt_for(self, earlier: str) -> list[int]:
        """The decoder's prompt: the vocabulary, then `earlier` (the words of the turn already decoded while
        the caller was speaking, so this part is heard as their continuation)."""
        previous = " ".join(part for part in (self.settings.vocabulary.strip(), earlier.strip()) if part)
        prompt: list[int] = []
        if previous:
            words = self.tokenizer.encode(" " + previous)
            prompt = [self.tokenizer.sot_prev, *words[-PROMPT_TOKENS:]]
        return [*prompt, *self.tokenizer.sot_sequence, self.tokenizer.no_timestamps]

    def speech_only(self, audio: np.ndarray) -> np.ndarray:
        """The utterance without its non-speech stretches (faster-whisper's Silero VAD); empty: none."""
        from faster_whisper.vad import VadOptions, get_speech_timestamps

        spans = get_speech_timestamps(audio, VadOptions(min_silence_duration_ms=500, speech_pad_ms=200))
        if not spans:
            return audio[:0]
        return np.concatenate([audio[span["start"] : span["end"]] for span in spans])

    def run(self, audio: np.ndarray, frames: int, beam_size: int = 0, earlier: str = "") -> Decoded:
        return self.run_batch([audio], frames, beam_size, [earlier])[0]

    def run_batch(self, audios: list[np.ndarray], frames: int, beam_size: int = 0,
                  earlier: list[str] | None = None) -> list[Decoded]:
        """Encode and decode several utterances as one CTranslate2 batch, each in a window of `frames`
        (`earlier`: per utterance, the words before it that the prompt carries)."""
        encoded = self.encode(audios, frames)
        duration_s = max(audio.size for audio in audios) / MODEL_RATE
        prompts = [self.prompt_for(text) if text else self.prompt for text in (earlier or [""] * len(audios))]
        max_length = min(MAX_TOKENS, max(map(len, prompts)) + int(duration_s * TOKENS_PER_S) + 16)
        results: Any = self.model.model.generate(
            encoded, prompts, beam_size=beam_size or self.settings.beam_size, patience=1.0,
            length_penalty=1.0, max_length=max_length, return_scores=True, return_no_speech_prob=True,
            suppress_blank=True, suppress_tokens=self.suppressed, max_initial_timestamp_index=0,
        )
        turn = self.end_of_turn(encoded, audios)
        decoded = []
        for index, result in enumerate(results):
            tokens = [t for t in result.sequences_ids[0] if t < self.tokenizer.eot]
            # CTranslate2 scores a hypothesis by its summed log-probability over its length (length_penalty 1).
            decoded.append(Decoded(self.tokenizer.decode(tokens).strip(), float(result.scores[0]),
                                   float(result.no_speech_prob), frames, end_of_turn=turn[index]))
        return decoded

    def encode(self, audios: list[np.ndarray], frames: int) -> Any:
        """The encoder's states for each utterance in a window of `frames` (a CTranslate2 StorageView,
        batch x frames/2 x width), as the decode uses them."""
        import ctranslate2

        features = []
        for audio in audios:
            padded = np.zeros(frames * (MODEL_RATE // FRAMES_PER_S) + 160, dtype=np.float32)
            padded[: min(audio.size, padded.size)] = audio[: padded.size]
            features.append(self.model.feature_extractor(padded)[:, :frames])
        return self.model.model.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(np.stack(features))),
                                       to_cpu=False)

    def end_of_turn(self, encoded: Any, audios: list[np.ndarray]) -> list[float | None]:
        """The phone-band head's P(turn finished) for each utterance, from states the decode computed anyway:
        pooled over the end of the speech (internal/stt/phone_turn.py), a few microseconds each."""
        from voicegate.internal.stt.phone_turn import POOL_SPANS, pool_states

        head = self.turn_head
        if head is None:
            return [None] * len(audios)
        states = np.asarray(encoded if self.settings.device == "cpu" else encoded.to_device(cpu_device()))
        if states.shape[-1] * len(POOL_SPANS) != head.weights.size:
            return [None] * len(audios)  # another model's states: the head does not apply
        return [head.probability(pool_states(states[i], audio.size)) if audio.size else None
                for i, audio in enumerate(audios)]

    def decode(self, audio: np.ndarray, earlier: str = "") -> Decoded:
        return self.decode_many([audio], [earlier])[0]

    def decode_many(self, audios: list[np.ndarray], earlier: list[str] | None = None) -> list[Decoded]:
        """Several callers' utterances in one batch (the window of the longest; noisy and clean ones in
        a batch each, as their beams differ); each one that looks unreliable in its short window is
        decoded again alone in the full one."""
        # The SNR is measured on the utterance as the VAD cut it, before Silero drops its quiet parts:
        # the noise between and around the words is what it is measured on.
        earlier = earlier or [""] * len(audios)
        snrs = [estimate_snr_db(audio) for audio in audios]
        if self.settings.vad_filter:
            audios = [self.speech_only(audio) for audio in audios]
        out = [Decoded("", 0.0, 1.0, 0, snr_db=snr) for snr in snrs]
        live = [i for i, audio in enumerate(audios) if audio.size]
        if not live:
            return out
        frames = max(window_frames(audios[i].size / MODEL_RATE, self.settings.short_window) for i in live)
        for beam in sorted({self.settings.beam_for(snrs[i]) for i in live}):
            group = [i for i in live if self.settings.beam_for(snrs[i]) == beam]
            decodes = self.run_batch([audios[i] for i in group], frames, beam, [earlier[i] for i in group])
            for i, decoded in zip(group, decodes, strict=True):
                out[i] = replace(self._settled(audios[i], decoded, beam, earlier[i]), snr_db=snrs[i])
        return out

    def _settled(self, audio: np.ndarray, decoded: Decoded, beam_size: int = 0, earlier: str = "") -> Decoded:
        if decoded.window_frames < FULL_WINDOW_FRAMES and (unreliable(decoded) or no_words(decoded)):
            full = self.run(audio, FULL_WINDOW_FRAMES, beam_size, earlier)
            decoded = Decoded(full.text, full.avg_logprob, full.no_speech_prob, FULL_WINDOW_FRAMES, retried=True,
                              end_of_turn=full.end_of_turn)
        if no_words(decoded):
            return Decoded("", decoded.avg_logprob, decoded.no_speech_prob, decoded.window_frames, decoded.retried,
                           end_of_turn=decoded.end_of_turn)
        return decoded


# ---- the worker process's entry points ------------------------------------------------------

_decoder: WhisperDecoder | None = None


def init_worker(settings: DecodeSettings) -> None:
    global _decoder
    watch_parent()
    _decoder = WhisperDecoder(settings)
    _decoder.run(np.zeros(MODEL_RATE // 2, dtype=np.float32), MIN_WINDOW_S * FRAMES_PER_S)  # warm the kernels


def decode_utterance(pcm: bytes, sample_rate: int, earlier: str = "") -> Decoded:
    assert _decoder is not None, "init_worker has not run in this process"
    return _decoder.decode(to_model_audio(pcm, sample_rate), earlier)


def decode_utterances(items: list[tuple[bytes, int, str]]) -> list[Decoded]:
    """Several utterances (pcm, sample rate, earlier words) decoded as one batch (DecoderPool's decode_batch)."""
    assert _decoder is not None, "init_worker has not run in this process"
    return _decoder.decode_many([to_model_audio(pcm, rate) for pcm, rate, _ in items], [e for _, _, e in items])


def utterance_window(pcm: bytes, sample_rate: int, earlier: str = "") -> int:
    """The encoder window an utterance will likely need (DecoderPool's batch_key: only utterances of one
    window are batched, so a short one is not padded to a long one's length)."""
    return window_frames(len(pcm) / 2 / sample_rate, short_window=True)
