"""A turn policy replayed over recorded signals (bench/turns/signals.py), and its trade-off curve.

At each of a dialogue's decision points the policy computes P(finished) from the signals, and holds the
turn as internal/turn/policy.py does (`fused_wait_ms`, counted from the VAD's end of utterance, and not
before both signals are in). The turn is released at the first point whose hold runs out before the caller
speaks again. For a paused sentence, a release before the last point is a premature end of turn; it is
*heard* when the reply's first audio (prepared from the transcript, `tts_ms` after the decision) would
have played before the caller went on, and *absorbed* otherwise (the pipeline drops a reply nobody heard).
For a finished sentence, the release latency is from the end of the caller's last word to the release.

Sweeping the threshold and the longest hold gives the curve LiveKit's eot-bench reports: premature ends
of turn against release latency, with its two summary numbers (premature at a 300 ms release, and the
release latency at 5 % premature).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.turns.signals import DecisionPoint, DialogueSignals
from voicegate.internal.turn.fusion import NOT_ASKED
from voicegate.internal.turn.policy import fused_wait_ms
from voicegate.internal.turn.text_cues import ends_unfinished

IPC_MS = 20.0  # handing an utterance to the recogniser's worker process and its text back
THRESHOLDS = tuple(round(x, 2) for x in np.arange(0.05, 0.96, 0.05))
MAX_WAITS = (800, 1200, 1600, 2000, 2500, 3000)
Probability = Callable[[DecisionPoint], float]


Ready = Callable[[DecisionPoint], float]


def decision_ready_ms(point: DecisionPoint) -> float:
    """From the VAD's end of utterance to both signals being in (they run side by side)."""
    return max(point.decode_ms + IPC_MS, point.smart_turn_ms)


def text_ready_ms(point: DecisionPoint) -> float:
    """... to the transcript alone being in."""
    return point.decode_ms + IPC_MS


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    probability: Probability
    threshold: float
    max_wait_ms: float
    graded: bool = False  # True: a hold graded by the probability (measured, and not the product's)
    ready: Ready = decision_ready_ms


@dataclass(frozen=True, slots=True)
class Outcome:
    released: bool
    premature: bool  # released at a point that was not the end of the turn
    heard: bool  # ... and the reply would have played before the caller went on
    latency_ms: float  # finished turns: end of the last word -> release
    absorbed: int  # premature releases nobody heard (dropped and merged by the pipeline)


def replay(signals: DialogueSignals, policy: Policy, tts_ms: float) -> Outcome:
    absorbed = 0
    for point in signals.points:
        ready = policy.ready(point)
        p = policy.probability(point)
        if policy.graded:  # the graded hold this was compared with: longer the less finished it looks
            hold = 0.0 if p >= policy.threshold else max(
                0.0, policy.max_wait_ms * (1.0 - p / policy.threshold) - ready)
        else:
            hold = fused_wait_ms(p, threshold=policy.threshold, max_wait_ms=policy.max_wait_ms, since_silence_ms=ready)
        release_s = point.end_s + (ready + hold) / 1000.0
        if point.resume_s is not None and not point.final and release_s >= point.resume_s:
            continue  # the caller spoke again first
        if point.final:
            return Outcome(True, False, False, (release_s - signals.speech_end_s) * 1000.0, absorbed)
        audio_s = max(release_s, point.end_s + (ready + tts_ms) / 1000.0)
        if point.resume_voice_s is not None and audio_s < point.resume_voice_s:
            return Outcome(True, True, True, math.nan, absorbed)
        absorbed += 1  # released, and taken back before anything played: the turn goes on
    return Outcome(False, absorbed > 0, False, math.nan, absorbed)


@dataclass(frozen=True, slots=True)
class CurvePoint:
    threshold: float
    max_wait_ms: float
    premature_pct: float  # paused sentences answered before their end
    heard_pct: float  # ... where the caller heard the reply start
    absorbed_pct: float  # paused sentences with a release nobody heard
    complete_split_pct: float  # finished sentences answered at an inner pause (a comma)
    release_p50_ms: float
    release_p95_ms: float


def evaluate(signals: list[DialogueSignals], name: str, probability: Probability, threshold: float,
             max_wait_ms: float, tts_ms: float, graded: bool = False, ready: Ready = decision_ready_ms) -> CurvePoint:
    policy = Policy(name, probability, threshold, max_wait_ms, graded, ready)
    paused = [replay(s, policy, tts_ms) for s in signals if s.kind == "paused"]
    complete = [replay(s, policy, tts_ms) for s in signals if s.kind == "complete"]
    latencies = [o.latency_ms for o in complete if o.released and not o.premature]
    n = max(1, len(paused))
    return CurvePoint(
        threshold, max_wait_ms,
        premature_pct=100.0 * sum(o.premature for o in paused) / n,
        heard_pct=100.0 * sum(o.heard for o in paused) / n,
        absorbed_pct=100.0 * sum(o.absorbed > 0 for o in paused) / n,
        complete_split_pct=100.0 * sum(o.premature for o in complete) / max(1, len(complete)),
        release_p50_ms=float(np.percentile(latencies, 50)) if latencies else math.nan,
        release_p95_ms=float(np.percentile(latencies, 95)) if latencies else math.nan,
    )


def sweep(signals: list[DialogueSignals], name: str, config: Config, tts_ms: float,
          thresholds: Iterable[float] = THRESHOLDS, max_waits: Iterable[float] = MAX_WAITS) -> list[CurvePoint]:
    return [evaluate(signals, name, config.probability(t), t, w, tts_ms, config.graded, config.ready(t))
            for t in thresholds for w in max_waits]


def frontier(points: list[CurvePoint], premature: Callable[[CurvePoint], float]) -> list[CurvePoint]:
    """The points no other beats on both release p50 and premature rate, by release latency."""
    ordered = sorted((p for p in points if not math.isnan(p.release_p50_ms)),
                     key=lambda p: (p.release_p50_ms, premature(p)))
    out: list[CurvePoint] = []
    best = math.inf
    for point in ordered:
        if premature(point) < best:
            out.append(point)
            best = premature(point)
    return out


def summary(points: list[CurvePoint], premature: Callable[[CurvePoint], float]) -> dict[str, Any]:
    """eot-bench's two numbers: premature at a 300 ms release, release at 5 % premature."""
    fast = [p for p in points if p.release_p50_ms <= 300.0]
    safe = [p for p in points if premature(p) <= 5.0]
    fastest = min((p.release_p50_ms for p in points if not math.isnan(p.release_p50_ms)), default=math.nan)
    return {
        "premature_pct_at_300ms": round(min(premature(p) for p in fast), 1) if fast else None,
        "fastest_release_p50_ms": round(fastest),
        "release_ms_at_5pct": round(min(p.release_p50_ms for p in safe)) if safe else None,
        "lowest_premature_pct": round(min(premature(p) for p in points), 1),
    }


@dataclass(frozen=True, slots=True)
class Config:
    """A policy up to its threshold and longest hold (the gate of `fused_gated` depends on the threshold)."""

    probability: Callable[[float], Probability]
    ready: Callable[[float], Ready]
    graded: bool
    asks_smart_turn: Callable[[DecisionPoint, float], bool]


def _fixed(probability: Probability, ready: Ready = decision_ready_ms) -> tuple[Callable[[float], Probability],
                                                                              Callable[[float], Ready]]:
    return (lambda _threshold: probability), (lambda _threshold: ready)


def configs(fusion: Any) -> dict[str, Config]:
    """The policies compared: each signal alone, the rule this replaced (Smart Turn vetoed by dangling
    words), and the fusion: Smart Turn asked at every silence, only once the words say its answer could
    change the decision (`fused_gated`, the earlier default), asked when the speech stops beside the decode
    and used only where it can change the decision (`fused_early`, the default since the phone-band head), or with a
    hold graded by the probability (`fused_graded`)."""

    def always(point: DecisionPoint, threshold: float) -> bool:
        return True

    def never(point: DecisionPoint, threshold: float) -> bool:
        return False

    def asked(point: DecisionPoint, threshold: float) -> bool:
        return bool(fusion.needs_audio(point.text, threshold, point.snr_db))

    def gated(threshold: float) -> Probability:
        return lambda pt: float(fusion.probability(pt.audio_p if asked(pt, threshold) else NOT_ASKED, pt.text,
                                                   pt.snr_db))

    def gated_ready(threshold: float) -> Ready:
        return lambda pt: text_ready_ms(pt) + (pt.smart_turn_ms if asked(pt, threshold) else 0.0)

    def early_ready(threshold: float) -> Ready:  # asked when the speech stops, beside the decode
        return lambda pt: decision_ready_ms(pt) if asked(pt, threshold) else text_ready_ms(pt)

    def fused(pt: DecisionPoint) -> float:
        return float(fusion.probability(pt.audio_p, pt.text, pt.snr_db))

    return {
        "smart_turn": Config(*_fixed(lambda pt: pt.audio_p), False, always),
        "previous": Config(*_fixed(lambda pt: 0.0 if ends_unfinished(pt.text) else pt.audio_p), False, always),
        "text": Config(*_fixed(lambda pt: float(fusion.probability(None, pt.text, pt.snr_db)), text_ready_ms), False,
                       never),
        "fused": Config(*_fixed(fused), False, always),
        "fused_graded": Config(*_fixed(fused), True, always),
        "fused_gated": Config(gated, gated_ready, False, asked),
        "fused_early": Config(gated, early_ready, False, always),
    }


def plot(curves: dict[str, list[CurvePoint]], path: str, title: str, highlight: str = "fused_gated") -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5))
    for name, points in curves.items():
        front = frontier(points, lambda p: p.premature_pct)
        axis.plot([p.release_p50_ms for p in front], [p.premature_pct for p in front], marker="o", markersize=3,
                  label=f"{name}: premature release")
        if name == highlight:
            heard = frontier(points, lambda p: p.heard_pct)
            axis.plot([p.release_p50_ms for p in heard], [p.heard_pct for p in heard], marker="s", markersize=3,
                      linestyle="--", label=f"{name}: premature heard by the caller")
    axis.axhline(5.0, color="grey", linewidth=0.8, linestyle=":")
    axis.axvline(400.0, color="grey", linewidth=0.8, linestyle=":")
    axis.set_xlabel("finished-turn release latency p50 (ms)")
    axis.set_ylabel("paused sentences answered early (%)")
    axis.set_title(title, fontsize=10)
    axis.set_xscale("log")
    axis.set_xlim(200, 2200)
    axis.set_xticks([200, 300, 400, 500, 700, 1000, 1500, 2000])
    axis.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    axis.get_xaxis().set_minor_formatter(matplotlib.ticker.NullFormatter())  # log minor ticks unlabelled
    axis.set_ylim(0, 100)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


# ---- eot-bench's numbers -------------------------------------------------------------------------
# LiveKit's eot-bench summarises a turn detector's trade-off curve by four numbers: the false cut-offs it
# makes when it must answer within 300 ms and within 600 ms, and how long it makes a finished caller wait
# when it may cut off at most 5 % and 10 % of the unfinished ones. A point of the curve is one setting of a
# policy (threshold, longest hold) or one pipeline run; its latency is the finished turns' release p50.

CUTOFF_AT_MS = (300, 600)  # the releases eot-bench reads the false cut-offs at
RELEASE_AT_PCT = (5, 10)  # the false cut-off rates it reads the release latency at


@dataclass(frozen=True, slots=True)
class TradeOff:
    release_ms: float  # finished turns: end of the last word -> release, p50 (NaN: none released)
    cutoff_pct: float  # unfinished turns answered before their end


def trade_offs(points: Iterable[CurvePoint], premature: Callable[[CurvePoint], float]) -> list[TradeOff]:
    """A policy's curve as (release latency, false cut-offs) pairs; `premature` picks released or heard."""
    return [TradeOff(p.release_p50_ms, premature(p)) for p in points]


def cutoffs_within(points: Iterable[TradeOff], release_ms: float) -> float | None:
    """The fewest false cut-offs (%) of any point that releases finished turns within `release_ms` (p50);
    None: no point is that fast."""
    fast = [p.cutoff_pct for p in points if not math.isnan(p.release_ms) and p.release_ms <= release_ms]
    return round(min(fast), 1) if fast else None


def release_within(points: Iterable[TradeOff], cutoff_pct: float) -> float | None:
    """The shortest release latency (ms, p50) of any point that cuts off at most `cutoff_pct` % of the
    unfinished turns; None: every point cuts off more (or releases nothing)."""
    safe = [p.release_ms for p in points if not math.isnan(p.release_ms) and p.cutoff_pct <= cutoff_pct]
    return round(min(safe)) if safe else None


def eot_bench(points: Iterable[TradeOff]) -> dict[str, float | None]:
    """eot-bench's four numbers: false cut-offs (%) at a 300 and a 600 ms release, release latency (ms)
    at 5 % and 10 % false cut-offs."""
    points = list(points)
    return {**{f"cutoff_pct_at_{ms}ms": cutoffs_within(points, ms) for ms in CUTOFF_AT_MS},
            **{f"release_ms_at_{pct}pct": release_within(points, pct) for pct in RELEASE_AT_PCT}}


def eot_bench_cells(numbers: dict[str, float | None]) -> list[str]:
    """The four numbers as table cells ("-": the curve never gets there)."""
    return [*("-" if numbers[f"cutoff_pct_at_{ms}ms"] is None else f"{numbers[f'cutoff_pct_at_{ms}ms']} %"
              for ms in CUTOFF_AT_MS),
            *("-" if numbers[f"release_ms_at_{pct}pct"] is None else f"{numbers[f'release_ms_at_{pct}pct']} ms"
              for pct in RELEASE_AT_PCT)]


EOT_BENCH_HEADER = [*(f"cut-offs @{ms} ms" for ms in CUTOFF_AT_MS), *(f"release @{pct} % cut-offs"
                                                                     for pct in RELEASE_AT_PCT)]
