"""Fit the end-of-turn fusion weights (internal/turn/fusion_weights.json) on turns generated here.

    .venv/bin/python -m scripts.train_turn_fusion [--offset-ms 200] [--workers 2] [--out PATH]

The training turns are bench/turns/cases.py's TRAIN sentences, none of which the benchmark measures on:
each spoken by the training voices (Piper with two other seeds than the benchmark's, and a female en-us
espeak-ng variant), with a 1 s pause cut in at its mark and at two other word boundaries, plus finished
sentences; through 8 kHz G.711 and at 16 kHz; clean and with white noise at 20 and 10 dB. Every end of utterance
the VAD finds (bench/turns/signals.py, the pipeline's own VAD, Smart Turn and Whisper) is one example:
label 1 where the caller's turn really ended, 0 where they went on.

A logistic regression (Newton's method, L2 penalty, classes weighted equally) is fitted twice: on all
features (with Smart Turn), and without the audio (the weights used when Smart Turn has no answer).
It writes the weights with the recipe and its fit, and prints the SHA-256 to pin in
internal/turn/fusion.py (WEIGHTS_SHA256). Nothing is downloaded: the models are the pinned ones.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.figures import progress
from bench.turns.cases import (
    RATES,
    TRAIN_COMPLETE,
    TRAIN_NOISES,
    TRAIN_SENTENCES,
    TRAIN_VOICES,
    Aligner,
    Dialogue,
    cached,
    complete_dialogues,
    paused_dialogues,
)
from bench.turns.signals import DialogueSignals, extract_all
from voicegate.internal.turn.fusion import FEATURES, feature_vector, weights_path
from voicegate.internal.turn.text_cues import text_cues

PAUSE_S = 1.0
EXTRA_CUTS = 2  # word boundaries cut besides the marked one
SEED = 11
L2 = 1.0


def training_marks(sentences: list[str] | None = None, seed: int = SEED, extra_cuts: int = EXTRA_CUTS) -> list[str]:
    """Each training sentence with its mark, and again with the mark moved to `extra_cuts` other word
    boundaries (scripts/train_phone_turn.py draws its own with another seed)."""
    rng = random.Random(seed)
    marks = []
    for marked in TRAIN_SENTENCES if sentences is None else sentences:
        marks.append(marked)
        words = marked.replace(" | ", " ").split()
        before = len(marked.split(" | ")[0].split())
        others = [k for k in range(1, len(words)) if k != before]
        for k in rng.sample(others, min(extra_cuts, len(others))):
            marks.append(" ".join(words[:k]) + " | " + " ".join(words[k:]))
    return marks


def build_dialogues() -> list[Dialogue]:
    aligner = Aligner()
    marks = training_marks()
    out: list[Dialogue] = []
    for voice in TRAIN_VOICES:
        out += paused_dialogues(marks, voice, (PAUSE_S,), aligner,
                                lambda done, v=voice: progress(f"training turns ({v})", done, len(marks)))
        out += complete_dialogues(TRAIN_COMPLETE, voice)
    return out


def examples(signals: list[DialogueSignals]) -> tuple[np.ndarray, np.ndarray]:
    rows, labels = [], []
    for dialogue in signals:
        for point in dialogue.points:
            rows.append(feature_vector(point.audio_p, text_cues(point.text), point.snr_db))
            labels.append(1.0 if point.final else 0.0)
    return np.array(rows), np.array(labels)


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = L2, iterations: int = 50) -> np.ndarray:
    """Class-balanced, L2-penalised (not the bias) logistic regression by Newton's method."""
    weight = np.where(y > 0.5, 0.5 / max(1.0, y.sum()), 0.5 / max(1.0, (1 - y).sum())) * len(y)
    w = np.zeros(x.shape[1])
    penalty = np.full(x.shape[1], l2)
    penalty[0] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-x @ w))
        gradient = x.T @ (weight * (p - y)) + penalty * w
        hessian = (x * (weight * p * (1 - p))[:, None]).T @ x + np.diag(penalty + 1e-6)
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def report(name: str, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> dict[str, float]:
    p = 1.0 / (1.0 + np.exp(-x @ w))
    eps = 1e-9
    finals, goes_on = p[y > 0.5], p[y < 0.5]
    fit = {"log_loss": float(-np.mean(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps))),
           "finished_at_or_above_0.5_pct": float(100 * np.mean(finals >= 0.5)) if finals.size else 0.0,
           "unfinished_below_0.5_pct": float(100 * np.mean(goes_on < 0.5)) if goes_on.size else 0.0}
    print(f"{name}: " + ", ".join(f"{k} {v:.3f}" for k, v in fit.items()))
    return fit


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--offset-ms", type=int, default=200, help="the VAD offset the examples are cut with")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=str(weights_path()))
    args = parser.parse_args()
    recipe = {"sentences": TRAIN_SENTENCES, "complete": TRAIN_COMPLETE, "voices": TRAIN_VOICES,
              "rates": RATES, "noises": TRAIN_NOISES, "pause_s": PAUSE_S, "extra_cuts": EXTRA_CUTS, "seed": SEED,
              "offset_ms": args.offset_ms, "cuts": "timestamps, else the quietest point near the mark"}
    dialogues = cached("fusion-train-dialogues", recipe, build_dialogues)
    signals: list[DialogueSignals] = []
    for rate in RATES:
        for noise in TRAIN_NOISES:
            def record(r: int = rate, n: str = noise) -> list[DialogueSignals]:
                return extract_all(dialogues, r, n, args.offset_ms, args.workers,
                                   progress=lambda done, total: progress(f"signals {r} Hz / {n}", done, total))

            signals += cached("fusion-train-signals", (recipe, rate, noise), record)
    x, y = examples(signals)
    print(f"{len(y)} examples ({int(y.sum())} finished, {int(len(y) - y.sum())} going on) from {len(signals)} turns")
    with_audio = fit_logistic(x, y)
    text_columns = np.array([not name.startswith("audio_") for name in FEATURES])
    text_only = np.zeros(len(FEATURES))
    text_only[text_columns] = fit_logistic(x[:, text_columns], y)
    document = {
        "features": list(FEATURES),
        "with_audio": [round(float(v), 4) for v in with_audio],
        "text_only": [round(float(v), 4) for v in text_only],
        "fit": {"with_audio": report("with audio", x, y, with_audio),
                "text_only": report("text only", x[:, text_columns], y, text_only[text_columns]),
                "examples": len(y)},
        "recipe": {k: v for k, v in recipe.items() if k not in ("sentences", "complete")},
        "recipe_sha256": hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest(),
        "trained_by": "scripts/train_turn_fusion.py",
    }
    path = Path(args.out)
    path.write_text(json.dumps(document, indent=1) + "\n")
    for name, weight in zip(FEATURES, with_audio, strict=True):
        print(f"  {name:15s} {weight:+.3f}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    print(f"\nwrote {path}\npin it in internal/turn/fusion.py: WEIGHTS_SHA256 = \"{digest}\"")
    return 0


if __name__ == "__main__":
    sys.exit(main())
