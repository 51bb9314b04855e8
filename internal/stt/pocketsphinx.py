"""Local speech-to-text with pocketsphinx, decoded in worker processes.

pocketsphinx holds the GIL while it decodes (a 3 s utterance blocked the event loop for 0.5 s here),
so decoding runs in a small process pool, never on the event loop or in a thread. Each utterance is
decoded whole when the VAD ends it: results are repeatable, and an idle call holds no decoder.
Telephone audio (8 kHz) is upsampled to the model's 16 kHz in the worker.

The vocabulary, in order of precedence: a JSGF grammar file, a phrase list (as a grammar), a
language model file, else a small model built from the built-in agent's phrases (see phrase_lm.py).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import tempfile
from collections.abc import AsyncIterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from internal.config.providers import PocketsphinxConfig
from internal.stt.base import Transcript

log = logging.getLogger(__name__)

MODEL_RATE = 16000
MAX_UTTERANCE_S = 30
MIN_UTTERANCE_MS = 120  # shorter "utterances" are clicks; not worth a decode


def grammar_from_phrases(phrases: list[str]) -> str:
    """A JSGF grammar accepting exactly the given phrases (lower-cased, punctuation removed)."""
    import re

    cleaned = sorted({" ".join(re.findall(r"[a-z']+", p.lower())) for p in phrases} - {""})
    if not cleaned:
        raise ValueError("[pocketsphinx] phrases has no words")
    return "#JSGF V1.0;\ngrammar phrases;\npublic <phrase> = " + " | ".join(cleaned) + ";\n"


def decoder_settings(config: PocketsphinxConfig, work_dir: Path) -> dict[str, Any]:
    """Decoder keyword arguments plus an optional grammar, resolved once in the parent process."""
    import pocketsphinx

    model_dir = Path(pocketsphinx.get_model_path())
    # The decoder's own dither draws from one random stream for the life of the worker; ours is re-seeded
    # for every utterance (see `dither` and `_decode`).
    settings: dict[str, Any] = {"loglevel": "FATAL", "dither": False}
    if config.hmm:
        settings["hmm"] = config.hmm
    if config.dictionary:
        settings["dict"] = config.dictionary
    grammar = ""
    if config.grammar:
        grammar = Path(config.grammar).read_text(encoding="utf-8")
    elif config.phrases:
        grammar = grammar_from_phrases(config.phrases)
    elif config.lm:
        settings["lm"] = config.lm
    else:
        from internal.stt.builtin_phrases import builtin_phrases
        from internal.stt.phrase_lm import write_model

        lm, dictionary, _unknown = write_model(builtin_phrases(), model_dir / "en-us" / "cmudict-en-us.dict",
                                               work_dir)
        settings["lm"] = str(lm)
        settings.setdefault("dict", str(dictionary))
    return {"decoder": settings, "grammar": grammar}


# ---- worker process side ----------------------------------------------------------------------

_decoder: Any = None


def _exit_when_orphaned(parent: int) -> None:
    # A worker whose server died without shutting the pool down (SIGKILL, a crashed test process) would
    # otherwise sit idle forever holding its model in memory.
    import os
    import time

    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def _init_worker(settings: dict[str, Any]) -> None:
    global _decoder
    import os
    import threading

    import pocketsphinx

    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), daemon=True,
                     name="orphan-watch").start()
    _decoder = pocketsphinx.Decoder(**settings["decoder"])
    if settings["grammar"]:
        _decoder.add_jsgf_string("grammar", settings["grammar"])
        _decoder.activate_search("grammar")


def fill_upper_band(pcm: bytes, rate: int = MODEL_RATE, level: float = 100.0) -> bytes:
    """Add quiet noise above 4 kHz to upsampled telephone audio.

    The model was trained on wideband speech; narrowband audio leaves its upper filterbank channels
    near -inf, which costs words. A fixed, low noise floor there (about -50 dBFS, a fixed seed so
    decoding stays repeatable) recovered 3 of 14 test phrases that plain upsampling lost.
    """
    import numpy as np

    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    if samples.size == 0:
        return pcm
    spectrum = np.fft.rfft(np.random.default_rng(1).normal(0.0, level, samples.size))
    spectrum[np.fft.rfftfreq(samples.size, 1.0 / rate) < 4000.0] = 0.0
    noise = np.fft.irfft(spectrum, n=samples.size)
    return np.clip(samples + noise, -32768, 32767).astype(np.int16).tobytes()


def dither(pcm: bytes) -> bytes:
    """Add +-1 LSB of noise from a fixed seed.

    Stretches of digital silence (zeros, common in RTP and pre-roll) give -inf log energies that derail
    the decoder. Seeding per utterance keeps a decode a pure function of its audio.
    """
    import numpy as np

    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.int32)
    noise = np.random.default_rng(1).integers(-1, 2, samples.size, dtype=np.int32)
    return np.clip(samples + noise, -32768, 32767).astype(np.int16).tobytes()


def _decode(pcm: bytes, sample_rate: int) -> str:
    if sample_rate != MODEL_RATE:
        from internal.audio.resample import resample

        pcm = resample(pcm, sample_rate, MODEL_RATE)
        if sample_rate < MODEL_RATE:
            pcm = fill_upper_band(pcm)
    pcm = dither(pcm)
    # Each decode must depend on its own audio only. The model's noise removal keeps a running noise
    # estimate and the cepstral mean carries over, both from the utterances before, so the same words
    # decoded differently after different ones (a warm-up on silence was enough to lose "say hello
    # world"). Resetting the feature extraction costs ~0.1 ms.
    _decoder.reinit_feat()
    _decoder.start_utt()
    _decoder.process_raw(pcm, full_utt=True)
    _decoder.end_utt()
    hyp = _decoder.hyp()
    return str(hyp.hypstr).strip() if hyp is not None else ""


# ---- event loop side --------------------------------------------------------------------------


class PocketsphinxSpeechToText:
    name = "pocketsphinx"

    def __init__(self, config: PocketsphinxConfig, work_dir: Path | None = None) -> None:
        self._config = config
        self._tmp = tempfile.TemporaryDirectory(prefix="voicegate-ps-") if work_dir is None else None
        self._work_dir = work_dir or Path(self._tmp.name if self._tmp else ".")
        self._settings = decoder_settings(config, self._work_dir)
        self._pool = ProcessPoolExecutor(max_workers=config.workers, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_init_worker, initargs=(self._settings,))

    async def warm_up(self) -> None:
        """Start the workers and load their models now, not on the first caller's first words."""
        loop = asyncio.get_running_loop()
        silence = bytes(MODEL_RATE * 2 // 5)
        await asyncio.gather(*(loop.run_in_executor(self._pool, _decode, silence, MODEL_RATE)
                               for _ in range(self._config.workers)))

    async def transcribe(self, pcm: bytes, sample_rate: int) -> str:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, _decode, pcm, sample_rate)

    def open(self, sample_rate: int) -> PocketsphinxStream:
        return PocketsphinxStream(self, sample_rate)

    async def aclose(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._tmp is not None:
            self._tmp.cleanup()


class PocketsphinxStream:
    continuous = False

    def __init__(self, engine: PocketsphinxSpeechToText, sample_rate: int) -> None:
        self._engine = engine
        self._rate = sample_rate
        self._buffer = bytearray()
        self._limit = sample_rate * 2 * MAX_UTTERANCE_S
        self._results: asyncio.Queue[Transcript | None] = asyncio.Queue()
        self._previous: asyncio.Task[None] | None = None
        self._closed = False

    def push(self, pcm: bytes) -> None:
        if not self._closed and len(self._buffer) < self._limit:
            self._buffer.extend(pcm)

    def end_of_speech(self) -> None:
        audio, self._buffer = bytes(self._buffer), bytearray()
        if self._closed:
            return
        if len(audio) < self._rate * 2 * MIN_UTTERANCE_MS // 1000:
            self._results.put_nowait(Transcript("", final=True))
            return
        # Chain on the previous decode so results come out in the order the caller spoke.
        self._previous = asyncio.create_task(self._decode(audio, self._previous))

    async def _decode(self, audio: bytes, previous: asyncio.Task[None] | None) -> None:
        text = ""
        try:
            text = await self._engine.transcribe(audio, self._rate)
        except Exception as exc:  # a failed decode loses one utterance, never the call
            log.warning("pocketsphinx decode failed: %s", type(exc).__name__)
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        self._results.put_nowait(Transcript(text, final=True))

    async def results(self) -> AsyncIterator[Transcript]:
        while (item := await self._results.get()) is not None:
            yield item

    async def aclose(self) -> None:
        self._closed = True
        self._results.put_nowait(None)
