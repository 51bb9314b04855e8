"""Benchmark: how many concurrent callers one voicegate node serves with answers that stay fast and right,
end to end, on the wire (not a test).

For each N in --calls, in order, a fresh `voicegate serve` process (bench/turns/voice_to_voice.py's: a temporary
config with the offline defaults, Whisper listening, the local agent answering, the tts default (Piper)
speaking, memory off, no greeting, pipeline.debug and telemetry.log_content on, metrics on; no session
limit, no INVITE or WHIP rate limit; then whatever --set adds) takes one unmeasured warm-up call (--warm-up
questions: a fresh node's first decode and synthesis are its slowest), then N calls at once, started
evenly over --stagger seconds so that they are not in lockstep. Each caller speaks Piper-voiced questions
(voice_to_voice.QUESTIONS, caller i starting at question i) for --seconds: after a second of silence,
each question is followed by a silence shared out in proportion to the questions' lengths so that speech
is --talk of the call, never less than --min-gap seconds (room for the reply). The script is recorded.

SIP (default): one sipp per call streams its script as 8 kHz PCMU through a per-call WireTap
(bench/common/wire_tap.py), which timestamps every RTP packet of both directions on the wire. WebRTC
(--transport webrtc): aiortc callers over POST /whip send the same script as Opus in real time and time
what they send and what they decode (bench/capacity/webrtc_callers.py).

Per turn, the voice-to-voice wait is voice_to_voice.py's: from the caller's last speech packet of a
question (> -45 dBFS; packets under 1.5 s apart are one question) to the agent's first speech packet after
it, before the caller speaks again; none there is an unanswered question, and agent speech in the 0.3 s
before the caller finished is a talked-over turn with no clean wait. Per step:
- waits p50/p95/max over clean turns; answered/asked questions; talked-over turns;
- what the server heard: word errors of its transcript (SIP: its JSON log; WebRTC: the DataChannel;
  a whole-turn line replacing the turn's earlier one, as the page shows it) against the script;
- lost packets: server -> caller from sequence-number gaps per SSRC (at the tap, or aiortc's receiver);
  caller -> server from the node's voicegate_rtp_packets_lost_total (SIP only);
- failed calls: sipp's return code not 0, a WebRTC caller that did not connect, or no media either way;
- the CPU of the server and all its children (Whisper workers, Piper) over the step, per call and per
  core, its peak resident memory (sampled every second), and the load generator's own CPU;
- where callers wait, from GET /metrics before, every second during and after the step: per worker pool
  the mean wait for a worker (voicegate_worker_wait_ms) and the deepest queue (voicegate_worker_queue),
  per turn stage the mean (voicegate_turn_latency_ms), and how late the event loop ran
  (voicegate_event_loop_lag_ms, and the worst of its 5 s medians); the bottleneck is the event loop when
  that median went over 100 ms, else the pool with the longest mean wait when over 100 ms, else the
  slowest stage.
Two verdicts per step, both asking for word errors <= --max-wer %, no failed call and every question
answered:
- **pass** (the issue's): wait p95 <= --max-p95-ms over clean turns;
- **pass vs ref**: waits at p50 and p95 no more than --max-added-ms over the first step's (the reference,
  a lightly loaded node). This is what the load itself costs: on a quiet node the waits are already set by
  the turn policy (a finished turn it is unsure of waits up to pipeline.max_turn_wait_ms) and by the
  reply's first sentence, which the absolute limit cannot tell apart from queueing.
It stops after --stop-after steps in a row failing both. The table, the largest N that passes each and a
PNG curve (p50 and p95 against N with the limit, answered share on a second axis) go to
bench/results/capacity*.json and .png.

--nodes 2: two `voicegate serve` nodes on this machine behind Kamailio (deploy/kamailio/kamailio.cfg,
bench/common/cluster.py's Kamailio, dispatching over both; RTP goes straight to the node that answered), each
with its share of the worker processes (whisper.workers and piper.workers = cores / 2), so the two hold as
many workers as one node; their CPU, memory and /metrics are added up.

    .venv/bin/python -m bench.capacity.conversations [--calls 4,8,12,16,24,32] [--seconds 60] [--talk 0.3]
        [--transport sip|webrtc] [--nodes 1|2] [--set whisper.workers=2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import re
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.capacity.node_metrics import (
    ProcessTreeMeter,
    Scrape,
    limiting_stage,
    merged,
    scrape,
    where_callers_wait,
)
from bench.capacity.plan import (
    CallScript,
    Criteria,
    StepFigures,
    call_scripts,
    load_verdict,
    sequence_loss,
    summarise_step,
    verdict,
)
from bench.common.cluster import PROXY_IP, Kamailio, free_port
from bench.common.figures import machine_busy_seconds, progress, save, table
from bench.common.wire_tap import Address, WireTap
from bench.turns.voice_to_voice import (
    QUESTIONS,
    Voicegate,
    attach_server,
    levels,
    measure,
    parse_setting,
    place_call,
    server_log,
    server_settings,
    voicegate,
)
from tests.speech import neural
from voicegate.internal.telemetry.loop_lag import LoopLag

SAMPLE_S = 1.0  # how often /metrics and the server's memory are read during a step
SETTLE_S = 1.0  # after the last hang-up, before the last scrape: a call's RTP losses are counted at its end
WARM_UP = ["What time is it?", "Thank you very much.", "What day is it today?"]  # short questions, short answers


RTP_PORTS_PER_NODE = 2000  # each node of a --nodes 2 deployment allocates RTP ports from a range of its own


def capacity_settings(data_dir: Path, args: argparse.Namespace, node: int = 0) -> dict[str, dict[str, Any]]:
    settings = server_settings(data_dir, args.stt, args.tts, [])
    # 0 is "no limit" for each: the step decides how many calls come, not the node's admission limits.
    settings["server"].update(max_sessions=0, whip_rate_per_min=0)
    settings["sip"]["invite_rate_per_min"] = 0
    settings["telemetry"]["metrics"] = True
    # Admission control off: a capacity step measures what the node does with N callers, so it must not
    # refuse some of them (bench/capacity/overload.py measures the refusals, with admission on).
    settings["admission"] = {"enabled": bool(getattr(args, "admission", False))}
    # The repeat cache off: the offline agent's canned answers repeat across callers, so a cache would say
    # most replies from memory and flatter the node against one whose answers come from a language model
    # (docs/speech.md). --set tts.repeat_cache_mb=8 measures the default.
    settings["tts"] = {**settings.get("tts", {}), "repeat_cache_mb": 0}
    if args.transport == "webrtc":
        settings["webrtc"] = {"enabled": True, "ice_hosts": ["127.0.0.1"]}
    if args.nodes > 1:
        # The nodes share this machine's cores: each gets its share of the worker processes a single node
        # sizes from all of them, so the deployment holds as many workers as one node would.
        share = max(1, len(os.sched_getaffinity(0)) // args.nodes)
        settings["whisper"] = {"workers": share}
        settings["piper"] = {"workers": share}
        low = 20000 + node * RTP_PORTS_PER_NODE
        settings["sip"].update(rtp_port_min=low, rtp_port_max=low + RTP_PORTS_PER_NODE - 1)
        settings["server"]["node_id"] = f"node-{node}"
    for section, key, value in args.set:
        settings.setdefault(section, {})[key] = value
    return settings


# ---- what the callers dial -----------------------------------------------------------------------------


@dataclass
class Deployment:
    """One node dialled directly, or several behind Kamailio (deploy/kamailio/kamailio.cfg, dispatching
    over them; signalling only, RTP goes straight to the node that answered, as deployed)."""

    nodes: list[Voicegate]
    settings: list[dict[str, dict[str, Any]]]
    sip: Address  # where callers send their INVITEs

    @property
    def metrics_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{s['server']['port']}/metrics" for s in self.settings]

    @property
    def http_url(self) -> str:
        """The first node's (WebRTC callers dial one node: an L7 balancer in front is docs/scaling.md's)."""
        return f"http://127.0.0.1:{self.settings[0]['server']['port']}"


@contextlib.contextmanager
def deployment(work: Path, args: argparse.Namespace) -> Iterator[Deployment]:
    settings = [capacity_settings(work / f"node-{i}" / "data", args, i) for i in range(args.nodes)]
    with contextlib.ExitStack() as stack:
        nodes = []
        for index, node_settings in enumerate(settings):
            directory = work / f"node-{index}"
            directory.mkdir(parents=True, exist_ok=True)
            nodes.append(stack.enter_context(voicegate(directory, node_settings)))
        if args.nodes == 1:
            yield Deployment(nodes, settings, nodes[0].sip)
            return
        proxy = Kamailio(work / "kamailio", free_port(socket.SOCK_DGRAM, PROXY_IP),
                         [f"sip:{node.sip[0]}:{node.sip[1]}" for node in nodes])
        proxy.directory.mkdir()
        proxy.start()
        stack.callback(proxy.stop)
        yield Deployment(nodes, settings, (PROXY_IP, proxy.port))


# ---- one step ------------------------------------------------------------------------------------------


@dataclass
class StepMeters:
    """What is read around the calls: the nodes' /metrics (summed over nodes) and processes, this process,
    the machine."""

    server: ProcessTreeMeter
    urls: list[str]
    before: Scrape | None = None
    after: Scrape | None = None
    window_s: float = 0.0
    server_cpu_s: float = 0.0
    generator_cpu_s: float = 0.0
    machine_busy_s: float = 0.0
    during: list[Scrape] = field(default_factory=list)
    # This process's own event loop (the callers, for WebRTC): its worst 5 s median lateness. Past ~0.5 s
    # the callers themselves run late (aioice drops a peer whose consent checks time out), so the step
    # measured the load generator, not the node.
    generator_lag: LoopLag = field(default_factory=LoopLag)
    generator_lag_worst_ms: float = 0.0

    async def watch(self, label: str, expected_s: float, stop: asyncio.Event) -> None:
        import httpx

        async with httpx.AsyncClient() as http:
            self.before = await self.scrape(http)
            cpu0, mine0, busy0, t0 = self.server.cpu_seconds(), generator_cpu(), machine_busy_seconds(), time.time()
            while not stop.is_set():
                self.generator_lag_worst_ms = max(self.generator_lag_worst_ms, self.generator_lag.sustained_ms())
                self.server.sample_rss()
                if (sample := await self.scrape(http)) is not None:
                    self.during.append(sample)
                progress(f"{label}: seconds", min(int(time.time() - t0), int(expected_s)), int(expected_s))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), SAMPLE_S)
            self.window_s = time.time() - t0
            self.server_cpu_s = self.server.cpu_seconds() - cpu0
            self.generator_cpu_s = generator_cpu() - mine0
            self.machine_busy_s = machine_busy_seconds() - busy0
            await asyncio.sleep(SETTLE_S)
            self.after = await self.scrape(http)

    async def scrape(self, http: Any) -> Scrape | None:
        return merged(list(await asyncio.gather(*(scrape(http, url) for url in self.urls))))


def generator_cpu() -> float:
    """This process (taps, aiortc callers) and its finished children (sipp), in CPU seconds."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


async def sip_calls(server: Deployment, scripts: list[CallScript], work: Path,
                    stagger_s: float) -> list[dict[str, Any]]:
    async def one(index: int, script: CallScript) -> tuple[WireTap, int]:
        await asyncio.sleep(index * stagger_s / len(scripts))
        call_dir = work / f"call-{index}"
        call_dir.mkdir()
        return await place_call(server, script.questions, call_dir, script.gaps_s)

    placed = await asyncio.gather(*(one(i, s) for i, s in enumerate(scripts)))
    # Read once every call is over: decoding every packet's level would take the callers' CPU meanwhile.
    return [{"call_id": tap.call_id, "failure": "" if rc == 0 else f"sipp rc {rc}",
             "media": bool(tap.caller) and bool(tap.reply), "script": asdict(script),
             "questions": script.questions, "turns": measure(levels(tap.caller), levels(tap.reply), script.questions),
             "reply_lost": sequence_loss(tap.reply), "caller_lost_at_tap": sequence_loss(tap.caller),
             "caller_packets": len(tap.caller), "reply_packets": len(tap.reply)}
            for (tap, rc), script in zip(placed, scripts, strict=True)]


async def webrtc_calls(url: str, scripts: list[CallScript], encoded: list[Any], stagger_s: float,
                       seconds: float) -> list[dict[str, Any]]:
    from bench.capacity.webrtc_callers import place_webrtc_calls

    callers = await place_webrtc_calls(url, encoded, stagger_s, seconds)
    calls = []
    for caller, script in zip(callers, scripts, strict=True):
        call: dict[str, Any] = {"call_id": caller.location, "failure": caller.failure,
                                "media": bool(caller.track.sent) and bool(caller.heard), "script": asdict(script),
                                "turns": measure(caller.track.sent, caller.heard, script.questions),
                                "reply_lost": caller.lost(), "caller_packets": len(caller.track.sent),
                                "reply_packets": len(caller.heard), "questions": script.questions}
        attach_server(call, caller.stages, caller.transcript)
        calls.append(call)
    return calls


async def warm_up(server: Deployment, work: Path, questions: int, gap_s: float) -> None:
    """One unmeasured call first: a fresh node's first decode, synthesis and verdict are its slowest (each
    worker loads and allocates as it first runs), and would otherwise be charged to the smallest steps."""
    if questions <= 0:
        return
    directory = work / "warm-up"
    directory.mkdir()
    _, rc = await place_call(server, WARM_UP[:questions], directory, gap_s)
    if rc != 0:
        print(f"the warm-up call failed (sipp rc {rc}); measuring anyway", file=sys.stderr)


async def load(server: Deployment, scripts: list[CallScript], work: Path,
               args: argparse.Namespace) -> tuple[list[dict[str, Any]], StepMeters]:
    encoded: list[Any] = []
    if args.transport == "webrtc":  # Opus, once per caller, before the step: its CPU is not the callers'
        from bench.capacity.webrtc_callers import encode_script

        encoded = [encode_script(script.pcm(48000)) for script in scripts]
    await warm_up(server, work, args.warm_up, args.min_gap)
    meters = StepMeters(ProcessTreeMeter(*(node.process.pid for node in server.nodes)), server.metrics_urls)
    stop = asyncio.Event()
    watching = asyncio.create_task(meters.watch(f"N={len(scripts)}", args.seconds + args.stagger, stop))
    lagging = asyncio.create_task(meters.generator_lag.run())
    await asyncio.sleep(0.2)  # the first scrape and meter readings come before the first call
    try:
        if args.transport == "webrtc":
            calls = await webrtc_calls(server.http_url, scripts, encoded, args.stagger, args.seconds)
        else:
            calls = await sip_calls(server, scripts, work, args.stagger)
    finally:
        stop.set()
        await watching
        lagging.cancel()
    return calls, meters


def run_step(count: int, args: argparse.Namespace, reference: StepFigures | None,
             reference_stages: dict[str, float] | None = None) -> dict[str, Any]:
    """One step of `count` callers; `reference`: the first step's figures and stage means (None: this is the
    first)."""
    scripts = call_scripts(count, QUESTIONS, args.seconds, args.talk, args.min_gap)
    with tempfile.TemporaryDirectory(prefix="voicegate-bench-capacity-") as tmp:
        work = Path(tmp)
        with deployment(work, args) as server:
            calls, meters = asyncio.run(load(server, scripts, work, args))
        if args.transport == "sip":
            stages: dict[str, dict[int, dict[str, float]]] = {}
            said: dict[str, list[list[str]]] = {}
            for node in server.nodes:
                node_stages, node_said = server_log(node.log, whole_turns=True)
                stages.update(node_stages)
                said.update(node_said)
            for call in calls:
                attach_server(call, stages.get(call["call_id"], {}), said.get(call["call_id"], []))
        errors = [line for node in server.nodes
                  for line in node.errors.read_text(errors="replace").splitlines() if "Traceback" in line]
        settings = server.settings
    where = where_callers_wait(meters.before, meters.after, meters.during)
    cores = len(os.sched_getaffinity(0))
    figures = summarise_step(calls, where, server_cpu_s=meters.server_cpu_s, window_s=meters.window_s, cores=cores,
                             peak_rss=meters.server.peak_rss)
    criteria = Criteria(args.max_p95_ms, args.max_wer, args.max_added_ms)
    reasons = verdict(figures, criteria)
    load_reasons = load_verdict(figures, reference or figures, criteria)
    others = meters.machine_busy_s - meters.server_cpu_s - meters.generator_cpu_s
    return {"calls": count, "figures": asdict(figures), "passed": not reasons, "failed_because": reasons,
            "passed_load": not load_reasons, "load_failed_because": load_reasons,
            "where_callers_wait": asdict(where), "limiting_stage": limiting_stage(where.stage_ms, reference_stages),
            "config": settings, "server_tracebacks": len(errors),
            "load_generator_cpu_pct": 100 * meters.generator_cpu_s / max(meters.window_s, 1e-9),
            "others_cpu_pct": 100 * others / max(meters.window_s, 1e-9),
            "load_generator_loop_lag_ms": meters.generator_lag_worst_ms,
            "rss_samples": meters.server.rss_samples,
            "calls_detail": [{**c, "turns": [asdict(t) for t in c["turns"]]} for c in calls]}


# ---- report --------------------------------------------------------------------------------------------


def ms(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.0f}"


def pct(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


HEADER = ["calls", "answered/asked", "p50 ms", "p95 ms", "max ms", "WER %", "lost % out/in", "failed",
          "CPU/call %", "RSS MB", "bottleneck", "limiting stage (vs ref)", "pass", "pass vs ref"]


def row(step: dict[str, Any]) -> list[str]:
    f = step["figures"]
    return [str(step["calls"]), f"{f['answered']}/{f['asked']}", ms(f["wait_p50_ms"]), ms(f["wait_p95_ms"]),
            ms(f["wait_max_ms"]), pct(f["word_error_pct"]), f"{pct(f['lost_out_pct'], 2)}/{pct(f['lost_in_pct'], 2)}",
            str(f["failed"]), pct(f["cpu_per_call_pct"]), f"{f['peak_rss_mb']:.0f}",
            step["where_callers_wait"]["bottleneck"], step.get("limiting_stage", "-"),
            "yes" if step["passed"] else "no", "yes" if step["passed_load"] else "no"]


def step_line(step: dict[str, Any]) -> str:
    f, where = step["figures"], step["where_callers_wait"]
    pools = ", ".join(f"{pool} {wait:.0f} ms (depth {where['pool_max_waiting'].get(pool, 0):.0f})"
                      for pool, wait in sorted(where["pool_wait_ms"].items())) or "none reported"
    stages = ", ".join(f"{s} {v:.0f}" for s, v in sorted(where["stage_ms"].items())) or "none reported"
    lag = ("not reported" if where.get("loop_lag_ms") is None else
           f"{where['loop_lag_ms']:.0f} ms mean ({where['loop_lag_sustained_max_ms']:.0f} ms worst 5 s median)")
    return (f"N={step['calls']}: server CPU {f['cpu_pct']:.0f} % of a core ({f['cpu_per_core_pct']:.0f} % of each of "
            f"{f['cores']}), load generator {step['load_generator_cpu_pct']:.0f} % (its loop "
            f"{step.get('load_generator_loop_lag_ms', 0):.0f} ms late, worst 5 s median), others "
            f"{step['others_cpu_pct']:.0f} %; talked over {f['talked_over']}; waits for a worker: {pools}; "
            f"event loop late {lag}; stage means (ms): {stages}; limiting stage: {step.get('limiting_stage', '-')}"
            + (f"; failed: {', '.join(step['failed_because'])}" if step["failed_because"] else "")
            + (f"; against the reference: {', '.join(step['load_failed_because'])}"
               if step["load_failed_because"] else ""))


def plot(steps: list[dict[str, Any]], limit_ms: float, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = [s["calls"] for s in steps]
    figure, waits = plt.subplots(figsize=(7, 4.2))
    for key, label, style in (("wait_p50_ms", "p50", "o-"), ("wait_p95_ms", "p95", "s-")):
        waits.plot(counts, [s["figures"][key] / 1000 for s in steps], style, label=f"voice to voice {label}")
    waits.axhline(limit_ms / 1000, color="red", linestyle="--", label=f"{limit_ms / 1000:g} s")
    waits.set_xlabel("concurrent callers")
    waits.set_ylabel("wait on the wire (s)")
    share = waits.twinx()
    share.plot(counts, [100 * s["figures"]["answered"] / max(s["figures"]["asked"], 1) for s in steps], "^:",
               color="gray", label="answered")
    share.set_ylabel("questions answered (%)")
    share.set_ylim(0, 105)
    lines = waits.get_legend_handles_labels()
    more = share.get_legend_handles_labels()
    waits.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left", fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def result_name(args: argparse.Namespace) -> str:
    parts = [*(["webrtc"] if args.transport == "webrtc" else []), *([f"{args.nodes}nodes"] if args.nodes > 1 else []),
             *([args.stt] if args.stt != "whisper" else []),
             *([f"tts-{args.tts}"] if args.tts else []), *(f"{k}-{v}" for _, k, v in args.set)]
    return "-".join(["capacity", *(re.sub(r"[^A-Za-z0-9.]+", "_", str(part)) for part in parts)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", default="4,8,12,16,24,32", help="comma-separated numbers of concurrent calls")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each call's script (s)")
    parser.add_argument("--talk", type=float, default=0.3, help="share of each call the caller spends talking")
    parser.add_argument("--min-gap", type=float, default=4.0,
                        help="least silence after a question (s): room for the reply")
    parser.add_argument("--stagger", type=float, default=5.0, help="the calls start evenly over this many seconds")
    parser.add_argument("--warm-up", type=int, default=2, choices=range(len(WARM_UP) + 1),
                        help="questions of one unmeasured SIP call before each step (0: none)")
    parser.add_argument("--transport", choices=["sip", "webrtc"], default="sip", help="how the callers reach the node")
    parser.add_argument("--stt", choices=["whisper", "pocketsphinx"], default="whisper", help="stt.provider")
    parser.add_argument("--tts", help="tts.provider for the server (default: the pipeline's, auto: Piper)")
    parser.add_argument("--set", action="append", type=parse_setting, default=[], metavar="SECTION.KEY=VALUE",
                        help="any config key for the server, e.g. whisper.workers=2 (repeatable)")
    parser.add_argument("--max-p95-ms", type=float, default=1500.0, help="pass: voice-to-voice p95 over clean turns")
    parser.add_argument("--max-wer", type=float, default=10.0, help="pass: word errors of what the server heard (%%)")
    parser.add_argument("--max-added-ms", type=float, default=300.0,
                        help="pass vs ref: how much longer than the first step's the waits may be, p50 and p95")
    parser.add_argument("--nodes", type=int, default=1, choices=[1, 2],
                        help="1: callers dial the node; 2: two nodes behind Kamailio on this machine")
    parser.add_argument("--stop-after", type=int, default=2,
                        help="stop after this many steps in a row failing both verdicts")
    args = parser.parse_args()
    if not 0 < args.talk < 1:
        parser.error("--talk is a share of the call, between 0 and 1")
    counts = [int(n) for n in args.calls.split(",")]
    neural(QUESTIONS, 8000)  # render (or find cached) every question before any server starts
    load_before = os.getloadavg()
    print(f"capacity over {args.transport}: N = {args.calls}, {args.seconds:g} s calls talking {args.talk:.0%} "
          f"(>= {args.min_gap:g} s after each question), started over {args.stagger:g} s; load average before: "
          + ", ".join(f"{x:.2f}" for x in load_before), flush=True)
    started, steps, failing = time.monotonic(), [], 0
    reference: StepFigures | None = None
    reference_stages: dict[str, float] | None = None
    for count in counts:
        step = run_step(count, args, reference, reference_stages)
        if reference is None:
            reference = StepFigures(**step["figures"])
            reference_stages = dict(step["where_callers_wait"]["stage_ms"])
        steps.append(step)
        print(table([row(step)], HEADER), flush=True)
        print(step_line(step), flush=True)
        failing = 0 if step["passed"] or step["passed_load"] else failing + 1
        if failing >= args.stop_after and count != counts[-1]:
            print(f"stopping: {failing} steps in a row failing both verdicts", flush=True)
            break
    passing = [s["calls"] for s in steps if s["passed"]]
    passing_load = [s["calls"] for s in steps if s["passed_load"]]
    where = "two nodes behind Kamailio" if args.nodes > 1 else "one node"
    print(f"\ncapacity over {args.transport}, {where} ({args.seconds:g} s calls, {args.talk:.0%} talking)")
    print(table([row(s) for s in steps], HEADER))
    served = f"word errors <= {args.max_wer:g} %, no failed call, every question answered"
    criteria = f"voice-to-voice p95 <= {args.max_p95_ms:g} ms over clean turns, {served}"
    criteria_load = (f"voice-to-voice p50 and p95 at most {args.max_added_ms:g} ms over the first step's "
                     f"(N={counts[0]}), {served}")
    print(f"largest N that passes ({criteria}): {max(passing) if passing else 'none'}")
    print(f"largest N that passes against the reference ({criteria_load}): "
          f"{max(passing_load) if passing_load else 'none'}")
    settings = {key: value for key, value in vars(args).items() if key != "set"}
    settings["overrides"] = [f"{s}.{k}={v!r}" for s, k, v in args.set]
    path = save(result_name(args), {"settings": settings, "criteria": criteria, "criteria_load": criteria_load,
                                    "largest_passing": max(passing) if passing else 0,
                                    "largest_passing_load": max(passing_load) if passing_load else 0, "steps": steps,
                                    "loadavg_before": list(load_before), "loadavg_after": list(os.getloadavg()),
                                    "seconds": round(time.monotonic() - started)})
    print(f"wrote {path} and {plot(steps, args.max_p95_ms, path.with_suffix('.png'))} "
          f"({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
