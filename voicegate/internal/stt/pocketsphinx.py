"""Local speech-to-text with pocketsphinx, decoded in worker processes.

pocketsphinx holds the GIL while it decodes (a 3 s utterance blocked the event loop for 0.5 s here),
so decoding runs in a small process pool, never on the event loop or in a thread. Each utterance is
decoded whole when the VAD ends it: results are repeatable, and an idle call holds no decoder.
Telephone audio (8 kHz) is upsampled to the model's 16 kHz in the worker.

The vocabulary, in order of precedence: a JSGF grammar file, a phrase list (as a grammar), a
language model file, else a small model built from the built-in agent's phrases (see phrase_lm.py).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

from voicegate.internal.config.providers import PocketsphinxConfig
from voicegate.internal.stt.workers import DecoderPool, UtteranceStream, watch_parent

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
        from voicegate.internal.stt.builtin_phrases import builtin_phrases
        from voicegate.internal.stt.phrase_lm import write_model

        lm, dictionary, _unknown = write_model(builtin_phrases(), model_dir / "en-us" / "cmudict-en-us.dict",
                                               work_dir)
        settings["lm"] = str(lm)
        settings.setdefault("dict", str(dictionary))
    return {"decoder": settings, "grammar": grammar}


# ---- worker process side ----------------------------------------------------------------------

_decoder: Any = None


def _init_worker(settings: dict[str, Any]) -> None:
    global _decoder
    import pocketsphinx

    watch_parent()
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
        from voicegate.internal.audio.resample import resample

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
    min_utterance_ms = MIN_UTTERANCE_MS
    max_utterance_s = MAX_UTTERANCE_S
    # Utterances one by one: a phrase grammar describes one phrase, not a turn of several.
    whole_turn = False

    def __init__(self, config: PocketsphinxConfig, work_dir: Path | None = None) -> None:
        self._config = config
        self._tmp = tempfile.TemporaryDirectory(prefix="voicegate-ps-") if work_dir is None else None
        self._work_dir = work_dir or Path(self._tmp.name if self._tmp else ".")
        self._settings = decoder_settings(config, self._work_dir)
        self.pool = DecoderPool("pocketsphinx", config.workers, _decode, _init_worker, (self._settings,))

    async def warm_up(self) -> None:
        """Start the workers and load their models now, not on the first caller's first words."""
        await self.pool.warm_up(bytes(MODEL_RATE * 2 // 5), MODEL_RATE)

    async def transcribe(self, pcm: bytes, sample_rate: int, caller: object | None = None) -> str:
        return str(await self.pool.decode(caller if caller is not None else self, pcm, sample_rate))

    def withdraw(self, caller: object) -> int:
        return self.pool.withdraw(caller)

    def open(self, sample_rate: int) -> UtteranceStream:
        return UtteranceStream(self, sample_rate)

    async def aclose(self) -> None:
        await self.pool.aclose()
        if self._tmp is not None:
            self._tmp.cleanup()
