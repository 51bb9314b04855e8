"""Recognition on noisy lines: word errors and the recogniser's CPU per noise condition, per approach.

    python -m bench.speech.noisy_lines [--set evaluation|tuning] [--approaches today,default,...]
        [--conditions none,white15,...] [--rates 8000,16000] [--voices piper,espeak]

The speech: bench/speech/recognition.py's 30 support-line sentences (the evaluation set) or the turn-taking
training sentences in another Piper seed (the tuning set, what the defaults were chosen on), with 300 ms
of silence either side as the VAD cuts an utterance. The noise: bench/common/noises.py (white, pink, street,
babble at 20, 15 and 10 dB speech-active SNR, each set with its own seeds and babble talkers), added
before the line: 8 kHz through G.711 mu-law, or 16 kHz.

Each approach decodes every clip in this process the way a worker does (internal/stt/whisper_decode.py,
one thread, int8), and is timed in CPU seconds (what a decode costs a core); the approaches take turns
clip by clip, so another process's load weighs on all of them alike. Approaches:
- `today`: the defaults before the beam chosen by SNR (greedy everywhere).
- `default`: the current defaults (a wider beam where the utterance's estimated SNR is low).
- `beam5`: beam 5 on every utterance.
- `rnnoise`: today's decoding after RNNoise (internal/audio/denoise.py, needs voicegate[denoise]).
- `novad`: today's without faster-whisper's VAD filter.
- `hotwords`: today's with a support line's vocabulary as hotwords.
- `base`, `base_noisy`: Whisper base (needs its two pinned packages), greedy / with the noisy beam.
(A Wiener filter in front of the recogniser was measured here too and removed: docs/performance.md,
"Experiments that did not pay".)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common.figures import progress, save, table, word_errors
from bench.common.noises import add_noise, all_conditions
from bench.turns.cases import TRAIN_COMPLETE, TRAIN_SENTENCES, channel, render

PAD_MS = 300
SUPPORT_VOCABULARY = ["account", "balance", "invoice", "subscription", "refund", "password", "appointment",
                      "payment", "order", "branch", "premium plan", "bank transfer"]
Audio = np.ndarray


@dataclass
class Approach:
    model: str = "tiny.en"
    settings: dict[str, Any] = field(default_factory=dict)
    before: Callable[[Audio], Audio] | None = None  # a filter in front of the recogniser


def rnnoise(audio: Audio) -> Audio:
    from voicegate.internal.audio.denoise import DELAY_MS, RnnoiseDenoiser

    denoiser = RnnoiseDenoiser(16000)
    pcm = (np.clip(audio, -1, 1) * 32767).astype(np.int16).tobytes()
    size = denoiser.frame_bytes
    pcm += bytes(-len(pcm) % size + size * 2)
    out = b"".join(denoiser.process(pcm[i:i + size]) for i in range(0, len(pcm), size))
    delay = 16 * DELAY_MS
    return (np.frombuffer(out, dtype=np.int16).astype(np.float32) / 32768.0)[delay:delay + audio.size]


APPROACHES: dict[str, Approach] = {
    "today": Approach(settings={"noisy_beam_size": 0}),
    "default": Approach(),
    "beam5": Approach(settings={"beam_size": 5, "noisy_beam_size": 0}),
    "rnnoise": Approach(settings={"noisy_beam_size": 0}, before=rnnoise),
    "novad": Approach(settings={"noisy_beam_size": 0, "vad_filter": False}),
    "hotwords": Approach(settings={"noisy_beam_size": 0, "hotwords": SUPPORT_VOCABULARY}),
    "base": Approach("base", {"noisy_beam_size": 0}),
    "base_noisy": Approach("base"),
}


def speech_set(set_name: str, voice: str) -> tuple[list[str], list[bytes]]:
    """(texts, clean 16 kHz clips with their padding) of the evaluation or the tuning set."""
    if set_name == "evaluation":
        from bench.speech.recognition import SENTENCES

        texts = list(SENTENCES)
    else:
        texts = [t.replace(" | ", " ") for t in TRAIN_SENTENCES] + [t for t in TRAIN_COMPLETE if len(t.split()) > 3]
        voice = {"piper": "piper-b", "espeak": "espeak-f"}[voice]
    pad = bytes(16000 * PAD_MS // 1000 * 2)
    return texts, [pad + pcm + pad for pcm in render(voice, texts)]


def decoder_for(approach: Approach, work: Path) -> Any:
    from voicegate.internal.config.providers import WhisperConfig
    from voicegate.internal.stt.whisper import decode_settings
    from voicegate.internal.stt.whisper_decode import WhisperDecoder
    from voicegate.internal.stt.whisper_models import resolve_model

    config = WhisperConfig(model=approach.model, download=False, device="cpu", **approach.settings)
    return WhisperDecoder(decode_settings(config, resolve_model(approach.model, work, download=False), cuda_count=0))


def measure(decoders: dict[str, Any], texts: list[str], clips: list[bytes], condition: str, rate: int,
            set_name: str) -> dict[str, dict[str, Any]]:
    """Every approach on every clip of one line; the approaches take turns clip by clip, so whatever else
    the machine is doing weighs on each approach's CPU figure alike."""
    from voicegate.internal.stt.whisper_decode import to_model_audio

    tally = {name: {"errors": 0, "words": 0, "cpu": 0.0, "snrs": []} for name in decoders}
    for index, (text, clip) in enumerate(zip(texts, clips, strict=True)):
        line = to_model_audio(channel(add_noise(clip, condition, index, set_name), rate), rate)
        for name, decoder in decoders.items():
            before = APPROACHES[name].before
            started = time.process_time()
            decoded = decoder.decode(before(line) if before is not None else line)
            spent = time.process_time() - started
            edits, count = word_errors(text, decoded.text)
            counts = tally[name]
            counts["errors"] += edits
            counts["words"] += count
            counts["cpu"] += spent
            counts["snrs"].append(decoded.snr_db)
    return {name: {"wer": round(100 * c["errors"] / c["words"], 1), "cpu_ms": round(1000 * c["cpu"] / len(texts)),
                   "snr_estimate_db": round(float(np.median(c["snrs"])), 1)} for name, c in tally.items()}


def main(argv: list[str] | None = None) -> int:
    from voicegate.internal.stt.workers import one_blas_thread

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", default="evaluation", choices=["evaluation", "tuning"])
    parser.add_argument("--approaches", default="today,default")
    parser.add_argument("--conditions", default=",".join(["none", *all_conditions()]))
    parser.add_argument("--rates", default="8000,16000")
    parser.add_argument("--voices", default="piper")
    args = parser.parse_args(argv)
    one_blas_thread()  # as in a worker: numpy's idle BLAS threads would spin on the other core
    conditions = args.conditions.split(",")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="voicegate-bench-noise-") as work:
        decoders: dict[str, Any] = {}
        for name in args.approaches.split(","):
            try:
                decoders[name] = decoder_for(APPROACHES[name], Path(work))
            except Exception as exc:  # a model that is not installed is reported, not fatal
                print(f"{name}: not measured ({exc})", file=sys.stderr)
        for voice in args.voices.split(","):
            texts, clips = speech_set(args.set, voice)
            lines = [(rate, condition) for rate in map(int, args.rates.split(",")) for condition in conditions]
            for done, (rate, condition) in enumerate(lines, 1):
                for name, figures in measure(decoders, texts, clips, condition, rate, args.set).items():
                    results[f"{voice}/{rate}/{condition}/{name}"] = figures
                progress(f"{voice}: {len(decoders)} approaches", done, len(lines))
    rows = []
    for key, r in results.items():
        voice, rate, condition, name = key.split("/")
        today = results.get(f"{voice}/{rate}/{condition}/today")
        ratio = f"{r['cpu_ms'] / today['cpu_ms']:.2f}x" if today else "-"
        rows.append([voice, rate, condition, name, f"{r['wer']} %", str(r["cpu_ms"]), ratio, str(r["snr_estimate_db"])])
    print(table(rows, ["voice", "rate", "noise", "approach", "WER", "CPU ms/utterance", "CPU vs today",
                       "SNR estimate dB"]))
    print(f"\nresults: {save(f'speech-noise-{args.set}', {'set': args.set, 'results': results})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
