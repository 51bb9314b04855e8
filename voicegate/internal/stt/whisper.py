"""Local speech-to-text with Whisper (faster-whisper, CTranslate2: int8 on the CPU, or a GPU), in worker processes.

The offline default: on telephone speech it was not tuned to, Whisper tiny.en gets a few words in a
hundred wrong where pocketsphinx's general model gets most of them wrong (bench/speech/recognition.py). It runs
like pocketsphinx: each utterance decoded whole when the VAD ends it, in a `DecoderPool` of worker
processes (never on the event loop), fair across calls and bounded; the model is loaded and warmed
in every worker at start-up, so the first caller does not wait for it. Decoding overlaps the
pipeline's turn-merge and quiet windows, which run from the same end of speech.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from voicegate.internal.config.providers import WhisperConfig
from voicegate.internal.config.sizing import worker_count
from voicegate.internal.devices import cuda_devices_ctranslate2, whisper_device
from voicegate.internal.stt.base import SpeechEvidence
from voicegate.internal.stt.phone_turn import HEAD_MODEL
from voicegate.internal.stt.whisper_decode import (
    MODEL_RATE,
    Decoded,
    DecodeSettings,
    decode_utterance,
    decode_utterances,
    init_worker,
    utterance_window,
)
from voicegate.internal.stt.whisper_models import ResolvedModel, resolve_model
from voicegate.internal.stt.workers import DecoderPool, UtteranceStream
from voicegate.internal.telemetry.queues import WorkQueue

log = logging.getLogger(__name__)

MIN_UTTERANCE_MS = 150  # shorter "utterances" are clicks; Whisper tends to invent words for them
MAX_UTTERANCE_S = 30  # Whisper's window: longer speech is cut (the pipeline caps utterances anyway)


def vocabulary_prompt(config: WhisperConfig) -> str:
    """The deployer's words as Whisper's previous-text prompt (as Deepgram's keyterms bias that engine)."""
    parts = [config.initial_prompt.strip()] if config.initial_prompt.strip() else []
    if config.hotwords:
        parts.append(", ".join(word.strip() for word in config.hotwords if word.strip()) + ".")
    return " ".join(parts)


def decode_settings(config: WhisperConfig, model: ResolvedModel, cuda_count: int | None = None) -> DecodeSettings:
    """`cuda_count`: the CUDA devices CTranslate2 sees (None: ask it). Raises DeviceUnavailable for a
    "cuda" this machine does not have."""
    count = cuda_devices_ctranslate2() if cuda_count is None else cuda_count
    device, compute_type = whisper_device(config.device, count, config.compute_type)
    return DecodeSettings(model_dir=str(model.path), compute_type=compute_type, cpu_threads=config.cpu_threads,
                          beam_size=config.beam_size, language=config.language, vad_filter=config.vad_filter,
                          short_window=config.short_window, vocabulary=vocabulary_prompt(config), device=device,
                          noisy_snr_db=config.noisy_snr_db, noisy_beam_size=config.noisy_beam_size,
                          # The phone-band head was fitted on tiny.en's encoder states; another model has others.
                          end_of_turn_head=model.name == HEAD_MODEL)


class WhisperSpeechToText:
    name = "whisper"
    min_utterance_ms = MIN_UTTERANCE_MS
    max_utterance_s = MAX_UTTERANCE_S
    whole_turn = True  # each pause re-decodes the turn so far: one sentence, not fragments (workers.py)

    def __init__(self, config: WhisperConfig, models_dir: Path,
                 progress: Callable[[str], None] | None = None) -> None:
        self.model = resolve_model(config.model, models_dir, download=config.download, progress=progress)
        self.settings = decode_settings(config, self.model)
        self.pool = DecoderPool("whisper", worker_count(config.workers), decode_utterance, init_worker,
                                (self.settings,), queue_limit=config.queue_limit, decode_batch=decode_utterances,
                                batch_size=config.batch_size, batch_key=utterance_window,
                                max_wait_s=config.shed_after_ms / 1000)
        self.retried = 0  # utterances decoded again in the full window (see whisper_decode.py)
        self.early_decode_s = config.early_decode_s  # workers.UtteranceStream: decode while the caller talks
        # Each decode also scores the phone-band end-of-turn head (Transcript.end_of_turn).
        self.end_of_turn_head = self.settings.end_of_turn_head

    def describe(self) -> dict[str, object]:
        return {"engine": self.name, "model": self.model.name, "source": self.model.source,
                "device": self.settings.device, "compute_type": self.settings.compute_type,
                "workers": self.pool.workers, "beam_size": self.settings.beam_size, "replaced": self.pool.replaced,
                "batch_size": self.pool.batch_size, "batches": self.pool.batches, "shed": self.pool.shed,
                "superseded": self.pool.withdrawn}

    def queues(self) -> list[WorkQueue]:
        return self.pool.queues()

    async def warm_up(self) -> None:
        """Start every worker; each loads and warms its model before taking work."""
        await self.pool.warm_up(bytes(MODEL_RATE // 5 * 2), MODEL_RATE)

    async def decode(self, pcm: bytes, sample_rate: int, caller: object | None = None, earlier: str = "") -> Decoded:
        decoded: Decoded = await self.pool.decode(caller if caller is not None else self, pcm, sample_rate, earlier)
        if decoded.retried:
            self.retried += 1
        return decoded

    async def transcribe(self, pcm: bytes, sample_rate: int, caller: object | None = None, earlier: str = "") -> str:
        return (await self.decode(pcm, sample_rate, caller, earlier)).text

    async def transcribe_turn(self, pcm: bytes, sample_rate: int, caller: object | None = None,
                              earlier: str = "") -> tuple[str, float | None, SpeechEvidence | None]:
        """The words, the phone-band head's P(turn finished) and the decode's scores, from the same decode."""
        decoded = await self.decode(pcm, sample_rate, caller, earlier)
        return decoded.text, decoded.end_of_turn, SpeechEvidence(decoded.no_speech_prob, decoded.avg_logprob)

    def withdraw(self, caller: object) -> int:
        """Take back `caller`'s decodes still waiting for a worker (a later decode of the turn covers them)."""
        return self.pool.withdraw(caller)

    def open(self, sample_rate: int) -> UtteranceStream:
        return UtteranceStream(self, sample_rate)

    async def aclose(self) -> None:
        await self.pool.aclose()
