"""The int8 copy of the pinned Piper voice, built at install time and pinned by SHA-256.

`python -m voicegate.internal.tts.voice_variant` (run by scripts/bootstrap.sh) writes it beside the other
set-up models; the server uses it when `piper.voice_variant` is "auto" (the default) or "int8"
(internal/tts/piper_voice.py, `resolve_voice`).

What it is: onnxruntime's static int8 quantisation (QDQ, per-channel weights) of the voice's convolutions
outside the vocoder. The vocoder (HiFi-GAN, the graph's /dec/ nodes) stays in float: quantised, it writes
a hiss into the pauses some 30 dB above the original's floor, which Whisper ignores and callers hear.
Measured with bench/speech/voice_variants.py on 20 held-out sentences: 12-13 % less CPU per second of speech,
Whisper's words wrong no worse, and a log-mel distance from the original (1.9 dB) under the one between two
renders of the original itself with its usual noise (2.7 dB). Dynamic int8 (ConvInteger) costs 3x the CPU;
onnxruntime's saved graph optimisations cost the same as the original (docs/performance.md).

The activation ranges are calibrated on fixed phoneme ids (voice_calibration.json: the recognition bench's
sentences through Piper's phonemiser), so the build needs neither Piper nor espeak-ng, and the same voice
with the same onnx and onnxruntime gives the same bytes on one kind of CPU (onnxruntime's float kernels,
and so the calibration, differ by instruction set: each kind's build is pinned, piper_voice.py
PINNED_VOICE_SHA256). Another onnxruntime may quantise differently: the result is then refused (its
SHA-256 is none of the pinned builds) and the server keeps the original voice.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from voicegate.internal.config.providers import PiperConfig
from voicegate.internal.tts.base import TtsError
from voicegate.internal.tts.piper_voice import (
    INT8_VOICE_FILE,
    PINNED_VOICE_SHA256,
    file_sha256,
    packaged_voice,
    resolve_voice,
    variant_dir,
    voice_config_path,
)

CALIBRATION = Path(__file__).with_name("voice_calibration.json")
# Convolutions whose node names start with these stay in float: the vocoder (see the module's docstring).
KEPT_FLOAT = ("/dec/",)
CALIBRATION_SEED = 53

Progress = Callable[[str], None]


def _quantize(source: Path, target: Path) -> None:
    """Write the int8 copy of `source` to `target` (needs the onnx package, a voicegate dependency)."""
    import numpy as np
    import onnx
    import onnxruntime
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    inference = json.loads(voice_config_path(source).read_text())["inference"]
    # The voice's own noise and pace: the activations' ranges are those of a real render.
    scales = np.array([inference["noise_scale"], inference["length_scale"], inference["noise_w"]], np.float32)
    sequences = json.loads(CALIBRATION.read_text())["phoneme_ids"]

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.pending = iter(sequences)

        def get_next(self) -> dict[str, Any] | None:
            ids = next(self.pending, None)
            if ids is None:
                return None
            return {"input": np.array([ids], np.int64), "input_lengths": np.array([len(ids)], np.int64),
                    "scales": scales}

    kept = [node.name for node in onnx.load(str(source)).graph.node
            if node.op_type == "Conv" and node.name.startswith(KEPT_FLOAT)]
    # The voice draws noise (RandomNormalLike) in every render, the calibration's included: a fixed seed
    # makes the activations' ranges, and so the bytes, the same on every build.
    onnxruntime.set_seed(CALIBRATION_SEED)
    logging.disable(logging.WARNING)  # the quantiser's notes on every tensor it leaves alone, by the hundred
    try:
        quantize_static(source, target, Reader(), quant_format=QuantFormat.QDQ, op_types_to_quantize=["Conv"],
                        per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        nodes_to_exclude=kept)
    finally:
        logging.disable(logging.NOTSET)


def build_int8_voice(source: Path, target_dir: Path, progress: Progress | None = None,
                     expected: frozenset[str] | None = PINNED_VOICE_SHA256[INT8_VOICE_FILE]) -> Path:
    """Quantise `source` into `target_dir`, its settings copied beside it; written whole or not at all.

    Raises TtsError when the result's SHA-256 is not one of `expected` (None: any, for the bench and the tests).
    """
    say = progress or (lambda _message: None)
    target_dir.mkdir(parents=True, exist_ok=True)
    final = target_dir / INT8_VOICE_FILE
    with tempfile.TemporaryDirectory(prefix="voicegate-voice-int8-", dir=target_dir) as scratch:
        partial = Path(scratch) / INT8_VOICE_FILE
        # The quantiser writes a "<name>-inferred.onnx" beside its input: a link here keeps it out of the
        # voice package's directory (and out of another build's way).
        link = Path(scratch) / "source.onnx"
        link.symlink_to(source)
        voice_config_path(link).symlink_to(voice_config_path(source))
        say(f"quantising the Piper voice to int8 ({source.name}, about half a minute)")
        _quantize(link, partial)
        digest = file_sha256(partial)
        if expected is not None and digest not in expected:
            raise TtsError(f"the int8 voice built here has SHA-256 {digest}, none of the pinned builds "
                           f"{', '.join(sorted(expected))} (another onnx or onnxruntime version, or another "
                           "kind of CPU?); keeping the original voice")
        shutil.copyfile(voice_config_path(source), voice_config_path(partial))
        os.replace(voice_config_path(partial), voice_config_path(final))
        os.replace(partial, final)
    return final


def main() -> int:
    """Set-up entry point: build the int8 voice once (idempotent; a wrong one is built again)."""
    directory = variant_dir()
    final = directory / INT8_VOICE_FILE
    if final.is_file() and voice_config_path(final).is_file() \
            and file_sha256(final) in PINNED_VOICE_SHA256[INT8_VOICE_FILE]:
        return 0
    try:
        source = packaged_voice()
        built = build_int8_voice(source, directory,
                                 progress=lambda message: print(f"bootstrap: {message}", flush=True))
    except (TtsError, ImportError, OSError) as exc:
        print(f"bootstrap: no int8 Piper voice ({exc}); the server speaks with the original", file=sys.stderr)
        return 0  # the original voice still works: set-up goes on
    print(f"bootstrap: int8 Piper voice verified at {built}", flush=True)
    return 0


def in_use(config: PiperConfig) -> str:
    """For `voicegate doctor`: which voice file the server would load, and why."""
    model = resolve_voice(config)
    if config.voice:
        return f"{model} ([piper] voice)"
    if model.name == INT8_VOICE_FILE:
        return f"int8 copy of the pinned voice ({model})"
    why = "piper.voice_variant = \"original\"" if config.voice_variant == "original" else (
        f"no int8 copy at {variant_dir() / INT8_VOICE_FILE}: run {sys.executable} -m "
        "voicegate.internal.tts.voice_variant")
    return f"the pinned voice, original ({why})"


if __name__ == "__main__":
    raise SystemExit(main())
