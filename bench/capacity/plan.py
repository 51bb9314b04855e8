"""The pure parts of bench/capacity/conversations.py: what each caller says and when, how a step's calls add up to its
figures, and whether the step passes. No server, socket or clock: tested in tests/test_bench_capacity.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from bench.common.figures import percentiles
from bench.common.wire_tap import Heard
from bench.turns.voice_to_voice import LEAD_S, TurnWait
from voicegate.internal.audio.rtp import RtpError, RtpPacket

# ---- what each caller says -----------------------------------------------------------------------------


def silence_plan(clip_s: list[float], seconds: float, talk: float, min_gap_s: float,
                 lead_s: float = LEAD_S) -> list[float]:
    """The silence after each question of a call of `seconds` that starts with `lead_s` of silence, then
    asks the questions lasting `clip_s` in order, as many as bring speech closest to `talk` of the call
    while each can still be followed by `min_gap_s`. The rest of the call is silence after the questions,
    shared in proportion to their lengths (a long question tends to get a long answer), each share at
    least `min_gap_s`; so the call lasts `seconds` and speech / `seconds` is as near `talk` as whole
    questions allow (below it when the floor leaves no room). One entry per question asked."""
    budget, target = seconds - lead_s, talk * seconds
    chosen: list[float] = []
    for clip in clip_s:
        fits = sum(chosen) + clip + (len(chosen) + 1) * min_gap_s <= budget
        if not fits or (chosen and abs(sum(chosen) + clip - target) > abs(sum(chosen) - target)):
            break
        chosen.append(clip)
    return share_out(chosen, budget - sum(chosen), min_gap_s)


def share_out(weights: list[float], total: float, floor: float) -> list[float]:
    """`total` split in proportion to `weights`, no share below `floor` (those at the floor leave the
    rest to be split again among the others). Expects total >= floor * len(weights)."""
    shares = [0.0] * len(weights)
    free, remaining = set(range(len(weights))), total
    while free:
        weight = sum(weights[i] for i in free)
        low = {i for i in free if weight <= 0 or remaining * weights[i] / weight < floor}
        if not low:
            for i in free:
                shares[i] = remaining * weights[i] / weight
            break
        for i in low:
            shares[i] = floor
        remaining -= floor * len(low)
        free -= low
    return shares


@dataclass(frozen=True)
class CallScript:
    questions: list[str]
    clip_s: list[float]  # each question's length as spoken
    gaps_s: list[float]  # the silence after each

    @property
    def seconds(self) -> float:
        return LEAD_S + sum(self.clip_s) + sum(self.gaps_s)

    @property
    def talk_share(self) -> float:
        return sum(self.clip_s) / self.seconds if self.seconds else 0.0

    def pcm(self, rate: int) -> bytes:
        """The whole call as PCM16 mono at `rate`: lead, then each question and its silence."""
        from tests.speech import neural

        clips = neural(self.questions, rate)
        return bytes(int(rate * LEAD_S) * 2) + b"".join(
            clip + bytes(int(rate * gap) * 2) for clip, gap in zip(clips, self.gaps_s, strict=True))


def call_scripts(count: int, questions: list[str], seconds: float, talk: float, min_gap_s: float) -> list[CallScript]:
    """A script per caller, caller i starting at question i (round the list), so that callers neither ask
    the same thing at the same time nor fall into step (their questions' lengths differ)."""
    from tests.speech import neural

    length = {q: len(clip) / 2 / 8000 for q, clip in zip(questions, neural(questions, 8000), strict=True)}
    most = int(seconds / min_gap_s) + 1
    scripts = []
    for caller in range(count):
        asked = [questions[(caller + i) % len(questions)] for i in range(most)]
        gaps = silence_plan([length[q] for q in asked], seconds, talk, min_gap_s)
        if not gaps:
            raise ValueError(f"a {seconds:g} s call has no room for a question and {min_gap_s:g} s of silence")
        scripts.append(CallScript(asked[:len(gaps)], [length[q] for q in asked[:len(gaps)]], gaps))
    return scripts


# ---- packets on the wire -------------------------------------------------------------------------------


def sequence_loss(packets: list[Heard]) -> tuple[int, int]:
    """(lost, expected) RTP packets of a stream as it arrived, from the sequence numbers per SSRC:
    expected is each SSRC's span of (unwrapped) numbers, lost what of it never came."""
    numbers: dict[int, list[int]] = {}
    for heard in packets:
        try:
            packet = RtpPacket.parse(heard.data)
        except RtpError:
            continue
        seen = numbers.setdefault(packet.ssrc, [])
        if seen:  # unwrap: the step from the last number, taken as the shorter way round 65536
            step = (packet.sequence - seen[-1]) % 65536
            seen.append(seen[-1] + (step - 65536 if step >= 32768 else step))
        else:
            seen.append(packet.sequence)
    lost = expected = 0
    for seen in numbers.values():
        span = max(seen) - min(seen) + 1
        expected += span
        lost += span - len(set(seen))
    return lost, expected


# ---- a step's figures and verdict ----------------------------------------------------------------------


@dataclass
class StepFigures:
    calls: int
    asked: int  # questions in the scripts
    answered: int  # questions the agent's speech followed before the next one
    clean: int  # answered turns the agent had not been speaking at: the waits below are theirs
    talked_over: int
    wait_p50_ms: float
    wait_p95_ms: float
    wait_max_ms: float
    word_error_pct: float  # of what the server heard, over calls with media
    failed: int
    failures: list[str] = field(default_factory=list)
    lost_out_pct: float | None = None  # server -> caller
    lost_in_pct: float | None = None  # caller -> server, as the node counted it (SIP)
    cpu_pct: float = math.nan  # the server's process tree, of one core
    cpu_per_call_pct: float = math.nan
    cpu_per_core_pct: float = math.nan  # of each of the machine's usable cores
    cores: int = 1
    peak_rss_mb: float = 0.0
    talk_share: float = 0.0  # speech / call length over the scripts
    stage_p50_ms: dict[str, float] = field(default_factory=dict)  # of the stages the server logged per turn


def summarise_step(calls: list[dict[str, Any]], where: Any, *, server_cpu_s: float, window_s: float, cores: int,
                   peak_rss: int) -> StepFigures:
    """`calls`: per call its `failure` ("" when none), `media` (both directions had packets), `turns`
    (TurnWait), `word_errors` (edits, words), `reply_lost` (lost, expected), `caller_packets`, `script`
    (a CallScript as a dict) and, over SIP, `caller_lost_at_tap`; `where`: node_metrics.WhereCallersWait."""
    turns: list[TurnWait] = [t for c in calls for t in c["turns"]]
    clean = [t.wait_ms for t in turns if t.wait_ms is not None and not t.talked_over]
    bad = [c["failure"] or "no media" for c in calls if c["failure"] or not c["media"]]
    heard = [c for c in calls if c["media"]]
    edits, words = (sum(c.get("word_errors", (0, 0))[i] for c in heard) for i in (0, 1))
    lost, expected = (sum(c["reply_lost"][i] for c in calls) for i in (0, 1))
    lost_in: float | None = None
    if any("caller_lost_at_tap" in c for c in calls):
        sent = sum(c["caller_packets"] for c in calls)
        missed = where.rtp_lost if where.rtp_lost is not None else sum(c["caller_lost_at_tap"][0] for c in calls)
        lost_in = 100 * missed / max(sent, 1)
    stages: dict[str, list[float]] = {}
    for turn in turns:
        for stage, value in turn.server.items():
            stages.setdefault(stage, []).append(value)
    cpu = 100 * server_cpu_s / window_s if window_s > 0 else math.nan
    speech = sum(sum(c["script"]["clip_s"]) for c in calls)
    length = sum(LEAD_S + sum(c["script"]["clip_s"]) + sum(c["script"]["gaps_s"]) for c in calls)
    wait = percentiles(clean, (50, 95))
    return StepFigures(
        calls=len(calls), asked=sum(len(c["script"]["questions"]) for c in calls),
        answered=sum(t.wait_ms is not None for t in turns), clean=len(clean),
        talked_over=sum(t.talked_over for t in turns), wait_p50_ms=wait["p50"], wait_p95_ms=wait["p95"],
        wait_max_ms=max(clean, default=math.nan), word_error_pct=100 * edits / words if words else math.nan,
        failed=len(bad), failures=sorted(set(bad)), lost_out_pct=100 * lost / expected if expected else None,
        lost_in_pct=lost_in, cpu_pct=cpu, cpu_per_call_pct=cpu / max(len(calls), 1),
        cpu_per_core_pct=cpu / max(cores, 1), cores=cores, peak_rss_mb=peak_rss / 2**20,
        talk_share=speech / length if length else 0.0,
        stage_p50_ms={stage: percentiles(values, (50,))["p50"] for stage, values in stages.items()})


@dataclass(frozen=True)
class Criteria:
    max_p95_ms: float = 1500.0
    max_wer_pct: float = 10.0
    # Against the reference (the first, least loaded step): how much longer its waits may grow.
    max_added_ms: float = 300.0


def verdict(figures: StepFigures, criteria: Criteria) -> list[str]:
    """Why the step fails; empty when it passes: a wait p95 within the limit over clean turns, what the
    server heard within the word-error limit, no failed call and every question answered."""
    reasons = served(figures, criteria)
    if not figures.clean or not figures.wait_p95_ms <= criteria.max_p95_ms:  # NaN: no clean turn at all
        reasons.append(f"wait p95 {figures.wait_p95_ms:.0f} ms > {criteria.max_p95_ms:.0f} ms")
    return reasons


def load_verdict(figures: StepFigures, reference: StepFigures, criteria: Criteria) -> list[str]:
    """Why the step fails against the reference step; empty when it passes: every question answered, no
    failed call, what the server heard within the word-error limit, and waits at p50 and p95 no more than
    `max_added_ms` longer than the reference's.

    This is the load's own cost. The waits of a lightly loaded node are set by the turn policy (a finished
    turn it is unsure of is held up to `max_turn_wait_ms`) and by the reply's first sentence; what the
    issue's absolute limit cannot tell apart from those is what more callers add: queues in front of the
    recogniser, Smart Turn and the voice."""
    reasons = served(figures, criteria)
    for name in ("wait_p50_ms", "wait_p95_ms"):
        value, limit = getattr(figures, name), getattr(reference, name) + criteria.max_added_ms
        if not figures.clean or not value <= limit:
            reasons.append(f"{name.removeprefix('wait_').removesuffix('_ms')} {value:.0f} ms > reference "
                           f"{getattr(reference, name):.0f} + {criteria.max_added_ms:.0f} ms")
    return reasons


def served(figures: StepFigures, criteria: Criteria) -> list[str]:
    """What both verdicts ask beyond the waits: no failed call, every question answered, heard right."""
    reasons = []
    if figures.failed:
        reasons.append(f"{figures.failed} failed call(s)")
    if figures.answered < figures.asked:
        reasons.append(f"{figures.asked - figures.answered} of {figures.asked} questions unanswered")
    if not figures.word_error_pct <= criteria.max_wer_pct:
        reasons.append(f"word errors {figures.word_error_pct:.1f} % > {criteria.max_wer_pct:g} %")
    return reasons
