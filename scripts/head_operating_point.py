"""The turn policy at its operating point with the phone-band head against Smart Turn, on held-out turns:
the trained head's evaluation, beside its trainer (it reads the trainer's recordings).

    .venv/bin/python -m scripts.head_operating_point [--offset 120] [--lines piper/none,piper/white,espeak/none]

The turn benchmarks' EVAL dialogues (bench/turns/cases.py; never trained on) through 8 kHz G.711, recorded by
scripts/train_phone_turn.py (the pipeline's VAD, Whisper with its encoder states, Smart Turn; cached in
/tmp/phone-turn-cache, recorded on first use: ~5 minutes a line). Each dialogue is replayed as
bench/turns/sweep.py does, with the product's policies (internal/turn): today's Smart Turn fusion
(asked where it can change the decision, threshold 0.75, hold 2000 ms), and the head's verdict (the
fusion at full weight, answered at `phone_turn_threshold` on a clean line, words that say more is coming
keeping the usual threshold and their own weights). Prints premature ends of turn heard by the caller,
finished turns split, and the finished turns' release p50 / p95.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common.figures import table
from bench.turns.signals import DecisionPoint, DialogueSignals
from bench.turns.sweep import decision_ready_ms, text_ready_ms
from voicegate.internal.config.sections import PipelineConfig
from voicegate.internal.stt.phone_turn import shared_head
from voicegate.internal.turn.fusion import NOT_ASKED, cleanness, shared_fusion
from voicegate.internal.turn.policy import verdict_threshold
from voicegate.internal.turn.text_cues import says_it_goes_on

TTS_MS = 150.0


def replay(signals: DialogueSignals, probability: Any, ready: Any, threshold: Any,
           max_wait_ms: float) -> tuple[str, float]:
    for point in signals.points:
        at = ready(point)
        p = probability(point)
        hold = 0.0 if p >= threshold(point) else max(0.0, max_wait_ms - at)
        release_s = point.end_s + (at + hold) / 1000.0
        if point.resume_s is not None and not point.final and release_s >= point.resume_s:
            continue
        if point.final:
            return "ok", (release_s - signals.speech_end_s) * 1000.0
        audio_s = max(release_s, point.end_s + (at + TTS_MS) / 1000.0)
        if point.resume_voice_s is not None and audio_s < point.resume_voice_s:
            return "heard", float("nan")
    return "never", float("nan")


def evaluate(lines: list[DialogueSignals], probability: Any, ready: Any, threshold: Any,
             max_wait_ms: float) -> list[str]:
    paused = [replay(s, probability, ready, threshold, max_wait_ms)[0] for s in lines if s.kind == "paused"]
    done = [replay(s, probability, ready, threshold, max_wait_ms) for s in lines if s.kind == "complete"]
    waits = [ms for outcome, ms in done if outcome == "ok"]
    return [f"{100 * paused.count('heard') / len(paused):.1f} %",
            f"{100 * sum(o != 'ok' for o, _ in done) / len(done):.1f} %",
            f"{np.percentile(waits, 50):.0f}", f"{np.percentile(waits, 95):.0f}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--offset", type=int, default=120, help="VAD offset (ms) the turns were recorded at")
    parser.add_argument("--lines", default="piper/none,piper/white,espeak/none", help="voice/noise, comma-separated")
    args = parser.parse_args()
    import __main__
    import scripts.train_phone_turn as training

    for name in dir(training):  # the recordings were pickled by the script run as __main__
        if not hasattr(__main__, name):
            setattr(__main__, name, getattr(training, name))
    config = PipelineConfig()
    fusion, head = shared_fusion(), shared_head()
    models: dict[str, Any] = {}
    rows = []
    for line in args.lines.split(","):
        voice, noise = line.split("/")
        recorded = training.eval_states(voice, noise, args.offset, models)
        smart_turn = [r.signals for r in recorded]
        by_head = [replace(r.signals, points=[replace(p, audio_p=head.probability(training.tail_pool(tail, end)))
                                              for p, tail, end in zip(r.signals.points, r.tails, r.ends, strict=True)])
                   for r in recorded]

        def asked(pt: DecisionPoint) -> bool:
            return bool(fusion.needs_audio(pt.text, config.end_of_turn_threshold, pt.snr_db))

        def gated(pt: DecisionPoint) -> float:
            return fusion.probability(pt.audio_p if asked(pt) else NOT_ASKED, pt.text, pt.snr_db)

        def heard_by_head(pt: DecisionPoint) -> float:
            if says_it_goes_on(pt.text):
                return fusion.probability(None, pt.text, pt.snr_db)
            return fusion.probability(pt.audio_p, pt.text, pt.snr_db, sound_trained_on_noise=True)

        def head_threshold(pt: DecisionPoint) -> float:
            if says_it_goes_on(pt.text):
                return config.end_of_turn_threshold
            return verdict_threshold(config.end_of_turn_threshold, config.phone_turn_threshold, cleanness(pt.snr_db))

        rows.append([f"{voice} 8 kHz {noise}", "Smart Turn", *evaluate(
            smart_turn, gated, lambda pt: decision_ready_ms(pt) if asked(pt) else text_ready_ms(pt),
            lambda pt: config.end_of_turn_threshold, config.max_turn_wait_ms)])
        rows.append([f"{voice} 8 kHz {noise}", "phone-band head", *evaluate(
            by_head, heard_by_head, text_ready_ms, head_threshold, config.max_turn_wait_ms)])
    print(f"VAD offset {args.offset} ms, threshold {config.end_of_turn_threshold} "
          f"(head, clean line: {config.phone_turn_threshold}), longest hold {config.max_turn_wait_ms} ms")
    print(table(rows, ["line", "end-of-turn sound", "premature heard", "finished split", "release p50", "p95"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
