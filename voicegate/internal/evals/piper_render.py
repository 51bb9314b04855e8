"""Render a scripted caller's speech with a Piper voice, the same samples on every run and machine.

A program of its own, never imported by voicegate: Piper is GPL-3.0-or-later and runs only in this
separate process (internal/evals/voice.py starts it). `python internal/evals/piper_render.py MODEL OUT_DIR
[SEED [LENGTH_SCALE]]` with one text per line on stdin writes OUT_DIR/<n>.wav for the n-th line (from 0).
Another seed gives the same voice other prosody (the turn-taking benchmark trains on one seed and measures
on another); another length scale another pace (the babble of bench/common/noises.py: > 1 slower, < 1 faster).

Piper's VITS model draws noise while it speaks (`noise_scale`, `noise_w`), from onnxruntime's
random generator, so by default each render of a sentence differs: prosody, pauses, length. Tests
that judge speech (a turn model on a half sentence, recognition of a caller) and evals would then pass
or fail by the draw. onnxruntime seeds a model's generator when the model is loaded, so each text gets a
fresh load after `set_seed`: a text's audio depends on the text alone, not on which other texts
the same process rendered before it.
"""

from __future__ import annotations

import sys
import wave
from pathlib import Path

SEED = 20261202


def main(model: str, out_dir: str, seed: int = SEED, length_scale: float | None = None) -> None:
    import onnxruntime
    from piper import PiperVoice, SynthesisConfig

    texts = sys.stdin.read().split("\n")
    for index, text in enumerate(texts):
        onnxruntime.set_seed(seed)
        voice = PiperVoice.load(model)
        with wave.open(str(Path(out_dir) / f"{index}.wav"), "wb") as clip:
            voice.synthesize_wav(text, clip, SynthesisConfig(length_scale=length_scale))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else SEED,
         float(sys.argv[4]) if len(sys.argv) > 4 else None)
