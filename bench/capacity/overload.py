"""Benchmark: a node offered more SIP callers than it can serve, with admission control on (not a
test). Does it refuse politely instead of failing everyone?

One fresh `voicegate serve` (bench/capacity/conversations.py's node: the offline defaults, metrics on, no
session cap, no INVITE rate limit; but [admission] on, as shipped) takes an unmeasured warm-up call, then
K = ceil(--factor x --capacity) callers in one burst (started evenly over --burst seconds), each speaking its
Piper-voiced questions for --seconds (conversations.py's scripts) through a WireTap that also times the
signalling. Each caller is one of:

- **served**: admitted (200) and heard a reply to every question; its waits (voice to voice, as
  conversations.py measures them) go into the admitted callers' p50/p95;
- **missed**: admitted and heard some replies, not all; **silent**: admitted and heard none (the target:
  none of either);
- **refused**: 503 from the node (time from its INVITE to the 503: target <= 1 s);
- **busy**: with --busy message, answered, told "all lines are busy" and sent our BYE (time from its INVITE
  to the message's first speech packet);
- **failed**: anything else (no final response, sipp failed before the INVITE).

    .venv/bin/python -m bench.capacity.overload --capacity 8 [--factor 3] [--seconds 30] [--burst 2]
        [--busy reject|message] [--set admission.target_load=0.7]

The figures go to bench/results/overload.json. --capacity is what the node serves (docs/scaling.md, from
conversations.py's sweep); the node is not told it: admission control decides from what it measures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.capacity.conversations import Deployment, deployment, warm_up
from bench.capacity.plan import CallScript, call_scripts
from bench.common.figures import percentiles, save, table
from bench.common.wire_tap import WireTap
from bench.turns.voice_to_voice import QUESTIONS, SPEECH_DBFS, levels, measure, parse_setting, place_call


def classify(tap: WireTap, script: CallScript, told_busy: set[str]) -> dict[str, Any]:
    """One caller's outcome from what its tap saw, and whether the node logged telling it the lines are
    busy (`told_busy`: Call-IDs; our BYE goes to sipp's Contact, past the tap)."""
    status, final_at = tap.final or (0, None)
    start = tap.invite_at
    outcome: dict[str, Any] = {"call_id": tap.call_id, "status": status, "asked": len(script.questions)}
    if status == 503 and start is not None and final_at is not None:
        return {**outcome, "kind": "refused", "busy_ms": (final_at - start) * 1000}
    if status != 200 or start is None:
        return {**outcome, "kind": "failed"}
    if tap.call_id in told_busy:  # answered, told the lines are busy, hung up on
        loud = [at for at, level in levels(tap.reply) if level >= SPEECH_DBFS]
        return {**outcome, "kind": "busy", "busy_ms": (loud[0] - start) * 1000 if loud else None}
    turns = measure(levels(tap.caller), levels(tap.reply), script.questions)
    waits = [turn.wait_ms for turn in turns if turn.wait_ms is not None]
    answered = len(waits)
    # Every question asked must be answered: a caller cut off before asking them all missed replies.
    kind = "served" if answered >= len(script.questions) else "silent" if answered == 0 else "missed"
    return {**outcome, "kind": kind, "answered": answered, "turns": len(turns), "waits_ms": waits}


def told_busy(log: Path) -> set[str]:
    """Call-IDs the node told the lines are busy (its JSON log; internal/sip/voice/busy.py)."""
    found = set()
    for line in log.read_text(errors="replace").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            entry = json.loads(line)
            if isinstance(entry, dict) and entry.get("message") == "sip caller told the lines are busy":
                found.add(str(entry.get("call_id", "")))
    return found


async def offer(server: Deployment, scripts: list[CallScript], work: Path, burst_s: float) -> list[WireTap]:
    async def one(index: int, script: CallScript) -> WireTap:
        await asyncio.sleep(index * burst_s / len(scripts))
        directory = work / f"call-{index}"
        directory.mkdir()
        tap, _ = await place_call(server, script.questions, directory, script.gaps_s)
        return tap

    return list(await asyncio.gather(*(one(i, s) for i, s in enumerate(scripts))))


async def run(server: Deployment, scripts: list[CallScript], work: Path, args: argparse.Namespace) -> list[WireTap]:
    await warm_up(server, work, args.warm_up, args.min_gap)
    return await offer(server, scripts, work, args.burst)


def summary(calls: list[dict[str, Any]], capacity: int) -> dict[str, Any]:
    kinds = {kind: sum(1 for call in calls if call["kind"] == kind)
             for kind in ("served", "missed", "silent", "refused", "busy", "failed")}
    waits = [wait for call in calls for wait in call.get("waits_ms", [])]
    per_caller_p95 = [percentiles(call["waits_ms"], (95,))["p95"] for call in calls if call.get("waits_ms")]
    busy = [call["busy_ms"] for call in calls if call.get("busy_ms") is not None]
    return {"offered": len(calls), "capacity": capacity, **kinds,
            "admitted_wait_ms": percentiles(waits, (50, 95)) if waits else {},
            "worst_caller_p95_ms": max(per_caller_p95, default=None),
            "busy_ms": {**percentiles(busy, (50, 95)), "max": max(busy)} if busy else {}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capacity", type=int, required=True, help="the callers the node serves (docs/scaling.md)")
    parser.add_argument("--factor", type=float, default=3.0, help="callers offered, as a multiple of --capacity")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each call's script (s)")
    parser.add_argument("--talk", type=float, default=0.3, help="share of each call the caller spends talking")
    parser.add_argument("--min-gap", type=float, default=4.0, help="least silence after a question (s)")
    parser.add_argument("--burst", type=float, default=2.0, help="the calls start evenly over this many seconds")
    parser.add_argument("--warm-up", type=int, default=1, choices=range(4), help="questions of the warm-up call")
    parser.add_argument("--busy", choices=["reject", "message"], default="reject", help="admission.busy")
    parser.add_argument("--stt", choices=["whisper", "pocketsphinx"], default="whisper", help="stt.provider")
    parser.add_argument("--tts", help="tts.provider for the server (default: the pipeline's, auto: Piper)")
    parser.add_argument("--set", action="append", type=parse_setting, default=[], metavar="SECTION.KEY=VALUE",
                        help="any other server setting, repeatable")
    args = parser.parse_args()
    args.transport, args.nodes, args.admission, args.stagger = "sip", 1, True, args.burst
    args.set = [("admission", "busy", args.busy), *args.set]
    count = math.ceil(args.capacity * args.factor)
    scripts = call_scripts(count, QUESTIONS, args.seconds, args.talk, args.min_gap)
    with tempfile.TemporaryDirectory(prefix="voicegate-bench-overload-") as tmp:
        work = Path(tmp)
        with deployment(work, args) as server:
            taps = asyncio.run(run(server, scripts, work, args))
        told = told_busy(server.nodes[0].log)
    calls = [classify(tap, script, told) for tap, script in zip(taps, scripts, strict=True)]
    figures = summary(calls, args.capacity)
    rows = [[str(figures[k]) for k in ("offered", "served", "missed", "silent", "refused", "busy", "failed")]]
    print(table(rows, ["offered", "served", "missed", "silent", "refused", "busy", "failed"]))
    waits, busy = figures["admitted_wait_ms"], figures["busy_ms"]
    if waits:
        print(f"admitted callers' waits: p50 {waits['p50']:.0f} ms, p95 {waits['p95']:.0f} ms; the worst caller's "
              f"p95 {figures['worst_caller_p95_ms']:.0f} ms")
    if busy:
        print(f"busy given in: p50 {busy['p50']:.0f} ms, p95 {busy['p95']:.0f} ms, max {busy['max']:.0f} ms")
    path = save("overload", {"args": {k: v for k, v in vars(args).items() if k != "set"}, "set": args.set,
                             "figures": figures, "calls": calls})
    print(f"-> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
