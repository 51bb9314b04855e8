"""Turn-taking: is a caller who pauses mid-sentence answered half-way, how long does a caller who has
finished wait, and does the agent stop for a real interruption but not for "mm-hm"?

    .venv/bin/python -m bench.turns.turn_taking curve    [--lines piper/8000/none,...] [--offsets 120,200,300]
    .venv/bin/python -m bench.turns.turn_taking pipeline [--lines ...] [--barge] [--parallel 3]
                                                        [--set pipeline.key=value] [--sweep pipeline.key=v1,v2,...]
    (either: --sentences N, the first N paused and N finished sentences only: a quick look)

The turns come from bench/turns/cases.py: 22 sentences with a pause of 0.5, 1.0 or 1.5 s cut in where a
person pauses (66 paused dialogues), 36 finished questions, statements and short answers, and for
barge-in 10 backchannels at 5 moments (50) and 15 interruptions at 2 (30), while the agent reads a long
answer. A line is a voice (Piper, espeak-ng), a channel (8 kHz G.711, 16 kHz) and a noise (none, white at 10 dB
after the line, or a held-out condition of bench/common/noises.py: `white15`, `pink20`, `street10`, `babble15`, ...,
added before the line; `--lines noisy` is piper at 8 kHz in every one, and at 16 kHz at 15 dB).
None of these sentences is in the fusion model's training set (scripts/train_turn_fusion.py).

`curve`: each dialogue's decision points are recorded once (bench/turns/signals.py: the pipeline's VAD,
Smart Turn and Whisper at every end of utterance, with their costs), then each policy is replayed over
them in milliseconds (bench/turns/sweep.py) for every threshold and longest hold: premature ends of turn
against finished-turn release latency, for Smart Turn alone, the rule this replaced, the words alone and
the fusion; LiveKit eot-bench's four numbers per line and policy (false cut-offs at a 300 and a 600 ms
release, release latency at 5 % and 10 % false cut-offs: bench/turns/sweep.py `eot_bench`); a PNG per line
in docs/images/. And what the turn models cost against the recogniser, per decision.

`pipeline`: the dialogues through the real pipeline on a 20 ms clock, several at once as concurrent
calls (Whisper workers, Smart Turn, the fusion, prepared replies, continuation merge; a stub agent that
answers at once, spoken by espeak-ng): premature releases (absorbed unheard, or heard: reply audio played
before the caller went on), answers to the whole sentence, release and first-audio latency, prepared
replies used and thrown away, and with --barge false and missed barge-ins. Each run is one point of a
curve; with --sweep (one run per setting) eot-bench's four numbers are read over the runs of each line.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common.figures import percentiles, pipeline_settings, progress, save, table, word_errors
from bench.turns.cases import (
    EVAL_COMPLETE,
    EVAL_PAUSED,
    Aligner,
    Dialogue,
    barge_dialogues,
    cached,
    complete_dialogues,
    paused_dialogues,
)
from bench.turns.human import SPLITS, human_dialogues
from bench.turns.signals import DecisionPoint, DialogueSignals, extract_all
from bench.turns.sweep import (
    EOT_BENCH_HEADER,
    TradeOff,
    configs,
    decision_ready_ms,
    eot_bench,
    eot_bench_cells,
    evaluate,
    frontier,
    plot,
    summary,
    sweep,
    trade_offs,
)

REPO = Path(__file__).resolve().parents[2]
PAUSES_S = (0.5, 1.0, 1.5)
DEFAULT_LINES = "piper/8000/none,piper/8000/white,espeak/8000/none,piper/16000/none"
TTS_MS = 150.0  # the first sentence's synthesis (Piper, short replies): bench/turns/turn_taking.py pipeline measures it
LONG_REPLY = ("Our opening hours are nine in the morning to six in the evening on weekdays, and ten to four on "
              "Saturdays. On Sundays and public holidays we are closed, but the phone line stays open for "
              "urgent questions, and you can always write to us through the website, where most answers "
              "come back within one working day.")
BARGE_WINDOW_S = 2.5  # an interruption must stop the agent within this long


def eval_sets(sentences: int = 0) -> tuple[list[str], list[str]]:
    """The paused and the finished sentences measured: all, or the first `sentences` of each (--sentences:
    a quick look, not a measurement)."""
    if not sentences:
        return EVAL_PAUSED, EVAL_COMPLETE
    return EVAL_PAUSED[:sentences], EVAL_COMPLETE[:sentences]


def eval_dialogues(voice: str, barge: bool = False, sentences: int = 0) -> list[Dialogue]:
    if voice in SPLITS:  # real people (bench/turns/human.py): their own turns, pauses and interruptions
        return cached("turns-human", (voice, barge, "v2"), lambda: human_dialogues(voice, barge))
    paused, complete = eval_sets(sentences)

    def build() -> list[Dialogue]:
        aligner = Aligner()
        return (paused_dialogues(paused, voice, PAUSES_S, aligner,
                                 lambda done: progress(f"dialogues ({voice})", done, len(paused)))
                + complete_dialogues(complete, voice))

    out: list[Dialogue] = cached("turns-eval", (paused, complete, PAUSES_S, voice, "v2"), build)
    if barge:
        out = out + cached("turns-barge", (voice, LONG_REPLY), lambda: barge_dialogues(voice))
    return out


def parse_lines(text: str) -> list[tuple[str, int, str]]:
    if text == "noisy":
        from bench.common.noises import KINDS, all_conditions

        text = ",".join([f"piper/8000/{c}" for c in ["none", *all_conditions()]]
                        + [f"piper/16000/{kind}15" for kind in KINDS])
    out = []
    for item in text.split(","):
        voice, rate, noise = item.split("/")
        out.append((voice, int(rate), noise))
    return out


# ---- curve ---------------------------------------------------------------------------------------


def costs(signals: list[DialogueSignals], asks: Callable[[DecisionPoint], bool]) -> dict[str, float]:
    """What the turn models cost against the recogniser, for a policy that asks Smart Turn when `asks`."""
    points = [p for s in signals for p in s.points]
    decode = sum(p.decode_ms for p in points)
    smart_turn = sum(p.smart_turn_ms for p in points if asks(p))
    vad = sum(s.vad_ms for s in signals)
    return {"decisions": len(points), "decode_ms_per_decision": round(decode / max(1, len(points)), 1),
            "smart_turn_ms_per_decision": round(smart_turn / max(1, len(points)), 1),
            "smart_turn_asked_pct": round(100 * sum(asks(p) for p in points) / max(1, len(points)), 1),
            "silero_ms_per_audio_s": round(vad / max(1e-9, sum(s.audio_s for s in signals)), 2),
            "turn_models_vs_recogniser_pct": round(100 * (smart_turn + vad) / max(1e-9, decode), 1),
            "decision_ready_ms_p50": round(percentiles([decision_ready_ms(p) for p in points], (50,))["p50"])}


def run_curve(args: argparse.Namespace) -> dict[str, Any]:
    from voicegate.internal.turn.fusion import shared_fusion

    fusion = shared_fusion()
    report: dict[str, Any] = {}
    rows = []
    gate = args.vad_gate
    gated = () if gate == "noise" else (gate,)  # part of the signals' cache key
    version = "v7" if gate == "noise" else "v5"  # the signals' recipe (v7: the final gate and SNR estimate)
    whisper = dict(parse_setting(item) for item in args.whisper)
    for voice, rate, noise in parse_lines(args.lines):
        dialogues = eval_dialogues(voice, sentences=args.sentences)
        paused, complete = eval_sets(args.sentences)
        for offset in [int(o) for o in args.offsets.split(",")]:
            label = (f"{voice}/{rate}/{noise}/{offset}ms" + ("" if gate == "noise" else f"/{gate} gate")
                     + "".join(f"/{k}={v}" for k, v in whisper.items()))
            signals: list[DialogueSignals] = cached(
                "turns-signals",
                (paused, complete, PAUSES_S, voice, rate, noise, offset, *gated, *whisper.items(), version),
                lambda d=dialogues, r=rate, n=noise, o=offset, lab=label: extract_all(
                    d, r, n, o, args.workers, gate == "noise", whisper,
                    lambda done, total: progress(f"signals {lab}", done, total)))
            chosen = configs(fusion)
            curves = {name: sweep(signals, name, c, args.tts_ms) for name, c in chosen.items()}
            asks = chosen[args.policy].asks_smart_turn
            line: dict[str, Any] = {"costs": costs(signals, lambda pt, a=asks: a(pt, args.threshold)), "configs": {}}
            for name, points in curves.items():
                heard = summary(points, lambda p: p.heard_pct)
                released = summary(points, lambda p: p.premature_pct)
                eot = eot_bench(trade_offs(points, lambda p: p.premature_pct))
                eot_heard = eot_bench(trade_offs(points, lambda p: p.heard_pct))
                line["configs"][name] = {"premature": released, "heard": heard, "eot_bench": eot,
                                         "eot_bench_heard": eot_heard,
                                         "frontier": [asdict(p) for p in frontier(points, lambda p: p.premature_pct)]}
                rows.append([label, name, *eot_bench_cells(eot), fmt(eot_heard["release_ms_at_5pct"], " ms"),
                             fmt(released["lowest_premature_pct"], "%"),
                             fmt(released["fastest_release_p50_ms"], " ms")])
            policy = chosen[args.policy]
            line["operating_point"] = asdict(evaluate(
                signals, args.policy, policy.probability(args.threshold), args.threshold, args.max_wait, args.tts_ms,
                policy.graded, policy.ready(args.threshold)))
            suffix = "".join(f"-{g}" for g in gated) + "".join(f"-{k}{v}" for k, v in whisper.items())
            # A quick look (--sentences) is no measurement: its picture stays out of the docs.
            images = REPO / "bench" / "results" if args.sentences else REPO / "docs" / "images"
            image = images / f"turns-{voice}-{rate}-{noise}-{offset}ms{suffix}.png"
            plot(curves, str(image), f"{voice}, {rate} Hz, noise {noise}, VAD offset {offset} ms "
                 f"({sum(s.kind == 'paused' for s in signals)} paused, "
                 f"{sum(s.kind == 'complete' for s in signals)} finished)")
            line["image"] = str(image.relative_to(REPO))
            report[label] = line
    print("eot-bench's numbers per line and policy: false cut-offs (paused sentences answered before their end)"
          " at a 300 / 600 ms release p50 of the finished ones, and that release at 5 / 10 % false cut-offs")
    print(table(rows, ["line", "policy", *EOT_BENCH_HEADER, "release @5 % heard", "lowest cut-offs",
                       "fastest p50"]))
    print()
    op_rows = []
    for label, line in report.items():
        op = line["operating_point"]
        c = line["costs"]
        if op:
            op_rows.append([label, f"{op['premature_pct']:.1f} %", f"{op['heard_pct']:.1f} %",
                            f"{op['complete_split_pct']:.1f} %", f"{op['release_p50_ms']:.0f}",
                            f"{op['release_p95_ms']:.0f}", f"{c['turn_models_vs_recogniser_pct']} %"])
    print(f"operating point: {args.policy}, threshold {args.threshold}, max_turn_wait_ms {args.max_wait}")
    print(table(op_rows, ["line", "premature", "heard", "finished split", "release p50", "p95",
                          "turn models / recogniser CPU", "words wrong"]))
    return report


def parse_setting(item: str) -> tuple[str, Any]:
    """"noisy_beam_size=0" -> ("noisy_beam_size", 0): a [whisper] setting for the recorded decodes."""
    import json

    key, _, value = item.partition("=")
    return key, json.loads(value)


def fmt(value: Any, unit: str) -> str:
    return "-" if value is None else f"{value}{unit}"


# ---- pipeline ------------------------------------------------------------------------------------


class TimedSink:
    def __init__(self) -> None:
        self.released: list[float] = []
        self.speaking: list[float] = []
        self.interrupted: list[float] = []
        self.answers: list[str] = []
        self.outcomes: list[str] = []

    def emit(self, event: Any) -> None:
        now = time.monotonic()
        if event.type == "state" and event.state == "thinking":
            self.released.append(now)
        elif event.type == "state" and event.state == "speaking":
            self.speaking.append(now)
        elif event.type == "response":
            if getattr(event, "interrupted", False):
                self.interrupted.append(now)
            else:
                self.answers.append(event.text)
        elif event.type == "turn":
            self.outcomes.append(event.outcome)


async def run_dialogue(services: Any, model: Any, dialogue: Dialogue, pcm: bytes, rate: int) -> dict[str, Any]:
    from voicegate.internal.conversation.rolling_summary import RollingSummary
    from voicegate.internal.identity import CallerIdentity
    from voicegate.internal.pipeline.localcall import LocalCall
    from voicegate.internal.pipeline.pipeline import VoicePipeline
    from voicegate.internal.session import Conversation, Session

    session = Session(CallerIdentity.anonymous("bench"), "talk", Conversation(RollingSummary(None, 1.0)))
    sink = TimedSink()
    pipeline = VoicePipeline(session, services, rate, sink)
    async with LocalCall(pipeline) as call:
        await call.ticks_later(1)
        started = time.monotonic()
        call.say(pcm)
        await call.wait_caller_done()
        await call.wait_agent_quiet(300, timeout_s=40)
    answered = [m.content for m in session.conversation.history if m.role == "user"]
    outcome: dict[str, Any] = {"answers": len(sink.answers), "turns": answered, "outcomes": sink.outcomes,
                               "prepared_used": pipeline.responder.prepared_used,
                               "prepared_discarded": pipeline.responder.prepared_discarded}
    if dialogue.kind in ("paused", "complete"):
        end = started + dialogue.speech_end_s
        resumed = started + dialogue.pause_at_s + dialogue.pause_s
        outcome["released_after_s"] = sink.released[-1] - end if sink.released else math.nan
        outcome["first_audio_after_s"] = sink.speaking[-1] - end if sink.speaking else math.nan
        outcome["released_after_resuming"] = bool(sink.released) and sink.released[-1] > resumed
        early = [t for t in sink.speaking if dialogue.kind == "paused" and t < resumed]
        outcome["premature_heard"] = bool(early)
        outcome["premature_release"] = bool([t for t in sink.released if dialogue.kind == "paused" and t < resumed])
    else:
        barge = started + dialogue.barge_s
        outcome["agent_speaking"] = bool(sink.speaking) and sink.speaking[0] < barge
        outcome["interrupted"] = any(barge - 1.0 < t < barge + BARGE_WINDOW_S for t in sink.interrupted)
        # An interruption is a turn: how long after the caller stopped speaking the agent answered it.
        later = [t for t in sink.speaking if t > barge + 0.2]
        end = started + dialogue.speech_end_s
        outcome["answer_after_s"] = later[0] - end if later and outcome["interrupted"] else math.nan
    return outcome


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    paused = [r for r in rows if r["kind"] == "paused"]
    complete = [r for r in rows if r["kind"] == "complete"]
    n = max(1, len(paused))
    # One turn on record, answered after the caller's continuation: the whole sentence, not its first half.
    whole = sum(len(r["turns"]) == 1 and r["released_after_resuming"] for r in paused)
    releases = [r["released_after_s"] * 1000 for r in complete if not math.isnan(r["released_after_s"])]
    audio = [r["first_audio_after_s"] * 1000 for r in complete if not math.isnan(r["first_audio_after_s"])]
    backchannels = [r for r in rows if r["kind"] == "backchannel" and r["agent_speaking"]]
    interruptions = [r for r in rows if r["kind"] == "interruption" and r["agent_speaking"]]
    prepared = sum(r["prepared_used"] + r["prepared_discarded"] for r in rows)
    answered = [r["answer_after_s"] * 1000 for r in interruptions if not math.isnan(r["answer_after_s"])]
    # Words wrong over the caller's whole sentences: what the agent was asked, all turns of a dialogue joined.
    errors = [word_errors(r["text"], " ".join(r["turns"])) for r in paused + complete]
    return {
        "words_wrong_pct": round(100 * sum(e for e, _ in errors) / max(1, sum(n for _, n in errors)), 1),
        "paused": len(paused), "complete": len(complete),
        "premature_release_pct": round(100 * sum(r["premature_release"] for r in paused) / n, 1),
        "premature_heard_pct": round(100 * sum(r["premature_heard"] for r in paused) / n, 1),
        "one_answer_to_the_whole_sentence_pct": round(100 * whole / n, 1),
        "finished_split_pct": round(100 * sum(r["answers"] > 1 for r in complete) / max(1, len(complete)), 1),
        "released_ms": {k: round(v) for k, v in percentiles(releases, (50, 95)).items()},
        "first_audio_ms": {k: round(v) for k, v in percentiles(audio, (50, 95)).items()},
        "prepared_replies": prepared,
        "prepared_discarded_pct": round(100 * sum(r["prepared_discarded"] for r in rows) / max(1, prepared), 1),
        "false_barge_in_pct": round(100 * sum(r["interrupted"] for r in backchannels) / max(1, len(backchannels)), 1),
        "missed_barge_in_pct": round(100 * sum(not r["interrupted"] for r in interruptions)
                                     / max(1, len(interruptions)), 1),
        "barge_cases": [len(backchannels), len(interruptions)],
        "interruption_answered_ms": {k: round(v) for k, v in percentiles(answered, (50, 95, 100)).items()}
        if answered else {},
        "interruptions_unanswered": sum(math.isnan(r["answer_after_s"]) for r in interruptions),
        "dialogues": rows,
    }


async def run_line(args: argparse.Namespace, voice: str, rate: int, noise: str,
                   extra: dict[str, Any]) -> dict[str, Any]:
    from tests.fakes.models import RecordingModel
    from voicegate.internal.config import load_config
    from voicegate.server.providers import build_services, build_stt, build_tts

    dialogues = eval_dialogues(voice, barge=args.barge, sentences=args.sentences)
    with tempfile.TemporaryDirectory(prefix="voicegate-bench-turns-") as work:
        config = load_config(None)
        config.server.data_dir = work
        config.tts.provider = "espeak"  # the agent's voice does not matter here; espeak-ng is the cheapest
        config.pipeline.sample_rate = rate
        config.pipeline.greeting = ""
        for key, value in extra.items():
            setattr(config.pipeline, key, value)
        stt, tts = build_stt(config), build_tts(config)
        await stt.warm_up()  # type: ignore[attr-defined]
        models = {"short": RecordingModel("Okay."), "long": RecordingModel(LONG_REPLY)}
        services = {k: build_services(config, stt, tts, m) for k, m in models.items()}  # type: ignore[arg-type]
        gate = asyncio.Semaphore(args.parallel)
        done = 0
        turn_model = services["short"].turn_model
        silero = services["short"].silero
        workers = stt.pool.worker_pids()  # type: ignore[attr-defined]
        from bench.common.figures import process_tree_cpu_seconds

        before = (sum(process_tree_cpu_seconds(p) for p in workers), turn_model.cpu_s if turn_model else 0.0,
                  silero.cpu_s if silero else 0.0)

        async def one(index: int, dialogue: Dialogue) -> dict[str, Any]:
            nonlocal done
            async with gate:
                kind = "long" if dialogue.kind in ("backchannel", "interruption") else "short"
                outcome = await run_dialogue(services[kind], models[kind], dialogue,
                                             dialogue.audio(rate, noise, index), rate)
            done += 1
            progress(f"pipeline {voice}/{rate}/{noise}", done, len(dialogues))
            return {"kind": dialogue.kind, "pause_s": dialogue.pause_s, "text": dialogue.text, **outcome}

        try:
            rows = await asyncio.gather(*(one(i, d) for i, d in enumerate(dialogues)))
            after = (sum(process_tree_cpu_seconds(p) for p in workers), turn_model.cpu_s if turn_model else 0.0,
                     silero.cpu_s if silero else 0.0)
        finally:
            await asyncio.gather(stt.aclose(), tts.aclose(), return_exceptions=True)
        result = summarise(list(rows))
        recogniser, smart_turn, vad = (a - b for a, b in zip(after, before, strict=True))
        result["cpu_s"] = {"recogniser": round(recogniser, 1), "smart_turn": round(smart_turn, 1),
                           "silero": round(vad, 1),
                           "turn_models_vs_recogniser_pct": round(100 * (smart_turn + vad) / max(1e-9, recogniser), 1)}
        return result


def sweep_settings(items: list[str]) -> list[dict[str, Any]]:
    """`--sweep pipeline.KEY=v1,v2,...` (repeatable): every combination, each checked by the config model
    ([{}]: no sweep, one run at the defaults and --set)."""
    import itertools

    axes = []
    for item in items:
        key, _, values = item.partition("=")
        axes.append([f"{key}={value}" for value in values.split(",") if value])
    return [pipeline_settings(list(combo)) for combo in itertools.product(*axes)] if axes else [{}]


def pipeline_eot(points: list[dict[str, Any]]) -> dict[str, Any]:
    """eot-bench's numbers over one line's pipeline runs (one run per --sweep setting): each run is one point
    of the curve, its finished turns' release p50 against its paused sentences released (or heard) early."""
    released = [TradeOff(float(r["released_ms"]["p50"]), float(r["premature_release_pct"])) for r in points]
    heard = [TradeOff(float(r["released_ms"]["p50"]), float(r["premature_heard_pct"])) for r in points]
    return {"points": len(points), "eot_bench": eot_bench(released), "eot_bench_heard": eot_bench(heard)}


async def run_pipeline(args: argparse.Namespace) -> dict[str, Any]:
    extra = pipeline_settings(args.set)
    report: dict[str, Any] = {"set": extra}
    rows = []
    eot_rows = []
    settings = sweep_settings(args.sweep)
    for voice, rate, noise in parse_lines(args.lines):
        line = f"{voice}/{rate}/{noise}"
        runs = []
        for setting in settings:
            r = await run_line(args, voice, rate, noise, {**extra, **setting})
            label = line + "".join(f" {k}={v}" for k, v in setting.items())
            r["setting"] = setting
            runs.append(r)
            report[label] = r
            rows.append([label, f"{r['premature_release_pct']} %", f"{r['premature_heard_pct']} %",
                         f"{r['one_answer_to_the_whole_sentence_pct']} %", f"{r['finished_split_pct']} %",
                         f"{r['released_ms']['p50']} / {r['released_ms']['p95']}",
                         f"{r['first_audio_ms']['p50']} / {r['first_audio_ms']['p95']}",
                         f"{r['prepared_discarded_pct']} % of {r['prepared_replies']}",
                         f"{r['false_barge_in_pct']} %" if args.barge else "-",
                         f"{r['missed_barge_in_pct']} %" if args.barge else "-",
                         ("{p50} / {p95} / {p100}".format(**r["interruption_answered_ms"])
                          if args.barge and r["interruption_answered_ms"] else "-"),
                         f"{r['cpu_s']['turn_models_vs_recogniser_pct']} %", f"{r['words_wrong_pct']} %"])
        eot = pipeline_eot(runs)
        report.setdefault("eot_bench", {})[line] = eot
        eot_rows.append([line, str(eot["points"]), *eot_bench_cells(eot["eot_bench"]),
                         *eot_bench_cells(eot["eot_bench_heard"])[2:]])
    print(table(rows, ["line", "premature release", "premature heard", "one whole answer", "finished split",
                       "released p50/p95 ms", "first audio p50/p95 ms", "prepared thrown away",
                       "false barge-in", "missed barge-in", "interruption answered p50/p95/max ms",
                       "turn models / recogniser CPU", "words wrong"]))
    print("\neot-bench's numbers per line over the runs above (a curve of one point without --sweep: a number "
          "is '-' when that run is not within the bound)")
    print(table(eot_rows, ["line", "runs", *EOT_BENCH_HEADER,
                           *(f"release @{pct} % heard" for pct in (5, 10))]))
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["curve", "pipeline"], nargs="?", default="curve")
    parser.add_argument("--lines", default=DEFAULT_LINES, help="voice/rate/noise, comma-separated")
    parser.add_argument("--offsets", default="200", help="curve: VAD offsets (ms) to record signals at")
    parser.add_argument("--workers", type=int, default=2, help="curve: processes recording signals")
    parser.add_argument("--whisper", action="append", default=[], metavar="KEY=VALUE",
                        help="curve: a [whisper] setting for the decodes (noisy_beam_size=0: greedy everywhere)")
    parser.add_argument("--vad-gate", choices=["noise", "plain"], default="noise",
                        help="curve: Silero's level gate, noise-aware (pipeline.vad_noise_gate, default) or plain")
    parser.add_argument("--tts-ms", type=float, default=TTS_MS, help="curve: first-sentence synthesis time")
    parser.add_argument("--threshold", type=float, default=0.75, help="curve: the operating point reported")
    parser.add_argument("--max-wait", type=float, default=2000)
    parser.add_argument("--policy", default="fused_early", help="curve: the policy of the operating point")
    parser.add_argument("--barge", action="store_true", help="pipeline: backchannels and interruptions too")
    parser.add_argument("--parallel", type=int, default=3, help="pipeline: dialogues at once (as concurrent calls)")
    parser.add_argument("--set", action="append", default=[], metavar="pipeline.KEY=VALUE")
    parser.add_argument("--sweep", action="append", default=[], metavar="pipeline.KEY=V1,V2,...",
                        help="pipeline: one run per value (repeatable: every combination), for eot-bench's "
                             "numbers over a curve of real pipeline runs")
    parser.add_argument("--sentences", type=int, default=0,
                        help="only the first N paused and N finished sentences (a quick look; default: all)")
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    if args.mode == "curve":
        report = run_curve(args)
    else:
        report = asyncio.run(run_pipeline(args))
    label = args.label or f"turns-{args.mode}"
    print(f"\nresults: {save(label, {'mode': args.mode, 'lines': args.lines, 'report': report})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
