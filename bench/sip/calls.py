"""Benchmark: how many concurrent SIP calls one voicegate process holds (not a test).

The server runs in this process: a real Gateway with SIP on a free port, every call a real dialog with
its RtpSession and an 8 kHz VoicePipeline (VAD on every frame), pinned to CPU 0. Speech recognition is
replaced by a deaf engine that ignores audio, and nobody is greeted, so what is measured is what the
target names: SIP + G.711 both ways + VAD, not recognition or synthesis. sipp, pinned to CPU 1, places
N calls (ramping at --rate calls/s), each streaming speech in a loop as RTP, holds them all for the
measured window, then hangs up. The server answers each call with a 20 ms stream of its own (comfort
silence when the agent is quiet).

For each N it reports the server's CPU per call, RTP loss towards the server (sequence gaps counted by
the RtpSessions: lost / expected over the window), late packets (missed their playout slot), the
send-interval deviation p99 (each RtpSession's p99 of |interval - 20 ms| over the last 10 s; the table
shows the p99 and the maximum over calls), and the largest N held with no loss and p99 < 5 ms.
`--profile` then runs the largest N whose calls all came up again, under cProfile, and names the top
functions.

    .venv/bin/python -m bench.sip.calls --calls 50,100,200,400 --seconds 10 --repeat 2 --profile

On a shared machine other work lands on the server's core; the "others %" column says how much, and
--repeat keeps, for each N, the attempt that was disturbed least.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy's BLAS threads would only steal the core

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common.figures import (
    cpu_busy_seconds,
    percentiles,
    pin,
    pipeline_settings,
    progress,
    raise_fd_limit,
    resident_kib,
    save,
    table,
)
from voicegate.internal.audio.g711 import ulaw_encode
from voicegate.internal.audio.rtp_session import RtpStats
from voicegate.internal.config import Config, load_config
from voicegate.internal.stt.base import Transcript
from voicegate.server.gateway import Gateway

TARGET_P99_MS = 5.0
SERVER_CPU, SIPP_CPU = 0, 1

SCENARIO = """<?xml version="1.0" encoding="ISO-8859-1" ?>
<!DOCTYPE scenario SYSTEM "sipp.dtd">
<scenario name="bench_call">
  <send retrans="500">
    <![CDATA[

      INVITE sip:agent@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: "Bench" <sip:+1555[call_number]@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
      To: <sip:agent@[remote_ip]:[remote_port]>
      Call-ID: [call_id]
      CSeq: 1 INVITE
      Contact: <sip:bench@[local_ip]:[local_port]>
      Max-Forwards: 70
      Content-Type: application/sdp
      Content-Length: [len]

      v=0
      o=bench 1 1 IN IP[local_ip_type] [local_ip]
      s=-
      c=IN IP[media_ip_type] [media_ip]
      t=0 0
      m=audio [auto_media_port] RTP/AVP 0 101
      a=rtpmap:0 PCMU/8000
      a=rtpmap:101 telephone-event/8000
      a=ptime:20

    ]]>
  </send>
  <recv response="100" optional="true"/>
  <recv response="200" rrs="true"/>
  <send>
    <![CDATA[

      ACK [next_url] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: "Bench" <sip:+1555[call_number]@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
      To: <sip:agent@[remote_ip]:[remote_port]>[peer_tag_param]
      Call-ID: [call_id]
      CSeq: 1 ACK
      Max-Forwards: 70
      Content-Length: 0

    ]]>
  </send>
  <nop><action><exec rtp_stream="AUDIO_FILE,-1,0"/></action></nop>
  <pause milliseconds="HOLD_MS"/>
  <send retrans="500">
    <![CDATA[

      BYE [next_url] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: "Bench" <sip:+1555[call_number]@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
      To: <sip:agent@[remote_ip]:[remote_port]>[peer_tag_param]
      Call-ID: [call_id]
      CSeq: 2 BYE
      Max-Forwards: 70
      Content-Length: 0

    ]]>
  </send>
  <recv response="200" crlf="true"/>
</scenario>
"""


# ---- a speech-to-text engine that hears nothing ------------------------------------------------------


class DeafStt:
    """Recognition is not what this benchmark measures: a streaming engine (every frame pushed to it)
    that never hears a word, so no turn, reply or "please repeat" ever starts."""

    name = "deaf"

    def open(self, sample_rate: int) -> DeafStream:
        return DeafStream()

    async def aclose(self) -> None:
        return None


class DeafStream:
    continuous = True

    def __init__(self) -> None:
        self._closed = asyncio.Event()

    def push(self, pcm: bytes) -> None:
        return None

    def end_of_speech(self) -> None:
        return None

    def new_turn(self) -> None:
        return None

    async def results(self) -> AsyncIterator[Transcript]:
        await self._closed.wait()
        return
        yield  # an async generator that never yields

    async def aclose(self) -> None:
        self._closed.set()


# ---- set-up --------------------------------------------------------------------------------------------






def free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])






def server_config(data_dir: Path, max_calls: int) -> Config:
    config = load_config(None)
    config.server.data_dir = str(data_dir)
    config.sip.enabled = True
    config.sip.bind = f"127.0.0.1:{free_port()}"
    config.sip.transports = ["udp"]
    config.sip.trusted_peers = ["127.0.0.1/32"]
    config.sip.invite_rate_per_min = 0
    config.sip.rtp_port_min, config.sip.rtp_port_max = 20000, 20000 + 4 * max_calls + 400
    config.sip.rtp_timeout_s = 60.0
    config.pipeline.greeting = ""
    config.webrtc.enabled = False
    return config


def caller_audio(directory: Path) -> Path:
    """Speech with a pause, as RAW mu-law for sipp's rtp_stream (looped): the VAD sees turns come and go."""
    import subprocess

    from voicegate.internal.audio.resample import resample
    from voicegate.internal.tts.espeak import parse_wav_header

    wav = subprocess.run(["espeak-ng", "-v", "en-us", "--stdout", "what time is it"], capture_output=True,
                         check=True).stdout
    pcm = resample(wav[44:], parse_wav_header(wav[:44]), 8000) + bytes(8000 * 2 * 2)
    path = directory / "caller.ulaw"
    path.write_bytes(ulaw_encode(pcm))
    return path


# ---- one step ------------------------------------------------------------------------------------------


def live_stats(gateway: Gateway) -> dict[str, RtpStats]:
    assert gateway.sip_calls is not None
    return {call_id: call.rtp.stats() for call_id, call in list(gateway.sip_calls.calls.items())}


def window(start: dict[str, RtpStats], end: dict[str, RtpStats], field: str) -> int:
    """A counter's growth over the measured window, over the calls alive at both ends of it."""
    return sum(getattr(end[c], field) - getattr(start[c], field) for c in end.keys() & start.keys())


async def wait_for(predicate: Any, timeout: float, label: str, total: int, count: Any) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        progress(label, count(), total)
        await asyncio.sleep(0.5)
    progress(label, total, total)
    return True


async def run_step(gateway: Gateway, calls: int, rate: int, seconds: float, warmup: float, work: Path,
                   audio: Path, pinned: bool, profile: bool = False) -> dict[str, Any]:
    sessions = gateway.sessions
    assert sessions is not None
    ramp = calls / rate
    hold_ms = int((ramp + warmup + seconds + 8) * 1000)
    scenario = work / f"bench_{calls}.xml"
    scenario.write_text(SCENARIO.replace("AUDIO_FILE", str(audio)).replace("HOLD_MS", str(hold_ms)))
    step_dir = work / f"step_{calls}"
    step_dir.mkdir(exist_ok=True)
    target = f"127.0.0.1:{gateway.config.sip.bind_port}"
    args = ["sipp", target, "-sf", str(scenario), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-p", str(free_port()),
            "-mp", str(free_port()), "-m", str(calls), "-l", str(calls), "-r", str(rate), "-nostdin",
            "-max_socket", str(4 * calls + 100), "-timeout", f"{int(hold_ms / 1000 + ramp + 60)}s",
            "-trace_stat", "-fd", "1", "-trace_err"]

    def sipp_on_other_core() -> None:
        if pinned:
            os.sched_setaffinity(0, {SIPP_CPU})
        raise_fd_limit()

    rss_before = resident_kib()
    sipp = await asyncio.create_subprocess_exec(*args, cwd=step_dir, stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.PIPE, preexec_fn=sipp_on_other_core)
    all_up = await wait_for(lambda: len(sessions) >= calls, ramp + 60, f"{calls} calls up", calls,
                            lambda: len(sessions))
    await asyncio.sleep(warmup)
    start_stats = live_stats(gateway)
    rss_held = resident_kib()
    profiler = cProfile.Profile() if profile else None
    cpu0, wall0, core0 = time.process_time(), time.monotonic(), cpu_busy_seconds(SERVER_CPU)
    if profiler is not None:
        profiler.enable()
    await asyncio.sleep(seconds)
    if profiler is not None:
        profiler.disable()
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    others = max(cpu_busy_seconds(SERVER_CPU) - core0 - cpu, 0.0) if pinned else float("nan")
    end_stats = live_stats(gateway)
    held = len(sessions)
    _, stderr = await asyncio.wait_for(sipp.communicate(), hold_ms / 1000 + ramp + 120)
    ended = await wait_for(lambda: len(sessions) == 0, 60, f"{calls} calls down", calls,
                           lambda: calls - len(sessions))

    received = window(start_stats, end_stats, "packets_received")
    lost = window(start_stats, end_stats, "lost")
    late = window(start_stats, end_stats, "late")
    shed = window(start_stats, end_stats, "shed")
    send_p99 = [s.send_jitter_p99_ms for s in end_stats.values()]
    recv_jitter = [s.jitter_ms for s in end_stats.values()]
    cpu_percent = 100 * cpu / wall
    row: dict[str, Any] = {
        "calls": calls,
        "held": held,
        "all_up": all_up,
        "all_ended": ended,
        "sipp_rc": sipp.returncode,
        "sipp_errors": stderr.decode(errors="replace")[-500:] if sipp.returncode else "",
        "cpu_percent": cpu_percent,
        "cpu_percent_per_call": cpu_percent / max(held, 1),
        # Growth of the server's resident memory while the calls were up, per call. Memory the allocator
        # keeps after earlier steps is reused, so later steps can read lower than the first.
        "rss_mib_per_call": (rss_held - rss_before) / 1024 / max(len(start_stats), 1),
        "others_on_core_percent": 100 * others / wall,
        "rx_packets": received,
        "rx_lost": lost,
        "rx_expected": received + lost,
        "rx_late": late,
        "rx_shed": shed,
        "rx_jitter_ms": percentiles(recv_jitter, (50, 99)),
        "send_p99_ms_p99_over_calls": float(np.percentile(send_p99, 99)) if send_p99 else float("nan"),
        "send_p99_ms_max_over_calls": max(send_p99, default=float("nan")),
        "send_p99_ms_median_over_calls": float(np.median(send_p99)) if send_p99 else float("nan"),
    }
    row["ok"] = (held == calls and lost == 0 and row["send_p99_ms_p99_over_calls"] < TARGET_P99_MS
                 and sipp.returncode == 0)
    if profiler is not None:
        row["profile"] = top_functions(profiler)
    return row


def top_functions(profiler: cProfile.Profile, count: int = 20) -> list[dict[str, Any]]:
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows = []
    for (filename, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append({"function": f"{Path(filename).name}:{line}({name})", "calls": calls,
                     "tottime_s": tottime, "cumtime_s": cumtime})
    rows.sort(key=lambda r: r["tottime_s"], reverse=True)
    return rows[:count]


# ---- main ----------------------------------------------------------------------------------------------


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="voicegate-bench-sip-"))
    try:
        audio = caller_audio(work)
        config = server_config(work / "data", max(args.calls))
        for key, value in args.pipeline.items():
            setattr(config.pipeline, key, value)
        gateway = Gateway(config, stt=DeafStt())
        await gateway.start()
        rows: list[dict[str, Any]] = []
        try:
            for calls in args.calls:
                attempts = []
                for _ in range(args.repeat):
                    attempts.append(await run_step(gateway, calls, args.rate, args.seconds, args.warmup, work,
                                                   audio, args.pinned))
                # The machine is shared: keep the attempt other work disturbed least (all are in the JSON).
                row = min(attempts, key=lambda r: r["others_on_core_percent"])
                row["attempts"] = [{k: v for k, v in a.items() if k != "attempts"} for a in attempts]
                rows.append(row)
                print(f"[{calls} calls] CPU {row['cpu_percent']:.1f}% ({row['cpu_percent_per_call']:.3f}%/call), "
                      f"RSS +{row['rss_mib_per_call']:.2f} MiB/call, "
                      f"lost {row['rx_lost']}/{row['rx_expected']}, late {row['rx_late']}, send p99 (p99 over "
                      f"calls) {row['send_p99_ms_p99_over_calls']:.2f} ms: {'ok' if row['ok'] else 'over the limit'}",
                      flush=True)
            profile = None
            if args.profile:
                # The largest N whose calls all came up: profiling a step that collapsed shows an idle loop.
                calls = max((r["calls"] for r in rows if r["all_up"]), default=min(args.calls))
                print(f"profiling {calls} calls for {args.seconds:g} s (cProfile roughly doubles the cost)", flush=True)
                profile = await run_step(gateway, calls, args.rate, args.seconds, args.warmup, work, audio,
                                         args.pinned, profile=True)
        finally:
            await gateway.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    held = [r["calls"] for r in rows if r["ok"]]
    return {"rows": rows, "largest_ok": max(held, default=0), "profile": profile}


def report(result: dict[str, Any], args: argparse.Namespace) -> None:
    header = ["calls", "held", "CPU %", "CPU %/call", "RSS MiB/call", "others %", "lost/expected", "late",
              "send p99 (p99 calls)", "send p99 (max)", "rx jitter p99", "ok"]
    rows = [[r["calls"], r["held"], f"{r['cpu_percent']:.1f}", f"{r['cpu_percent_per_call']:.3f}",
             f"{r['rss_mib_per_call']:.2f}", f"{r['others_on_core_percent']:.1f}", f"{r['rx_lost']}/{r['rx_expected']}",
             r["rx_late"],
             f"{r['send_p99_ms_p99_over_calls']:.2f} ms", f"{r['send_p99_ms_max_over_calls']:.2f} ms",
             f"{r['rx_jitter_ms']['p99']:.2f} ms", "yes" if r["ok"] else "no"] for r in result["rows"]]
    print()
    print(table(rows, header))
    print(f"\nlargest N held with 0 loss and send-interval p99 < {TARGET_P99_MS:g} ms: {result['largest_ok']} "
          f"(target: >= 400 on one core)")
    if result["profile"] is not None:
        print(f"\ncProfile of the server at {result['profile']['calls']} calls, top functions by own time:")
        for entry in result["profile"]["profile"][:15]:
            print(f"  {entry['tottime_s']:7.3f} s own  {entry['cumtime_s']:7.3f} s cum  {entry['calls']:>9}  "
                  f"{entry['function']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", default="50,100,200,400", help="comma-separated numbers of concurrent calls")
    parser.add_argument("--rate", type=int, default=40, help="new calls per second while ramping up")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per step")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds between the last call up and measuring")
    parser.add_argument("--repeat", type=int, default=1,
                        help="attempts per N; the one least disturbed by other work on the core is reported")
    parser.add_argument("--no-pin", action="store_true", help="let the OS place the server and sipp")
    parser.add_argument("--profile", action="store_true", help="then profile the largest N with cProfile")
    parser.add_argument("--set", action="append", default=[], metavar="pipeline.KEY=VALUE",
                        help="a pipeline setting (e.g. pipeline.vad=energy pipeline.end_of_turn=off)")
    parser.add_argument("--label", default="sip_calls", help="name of the results file")
    args = parser.parse_args()
    args.calls = [int(c) for c in args.calls.split(",") if c.strip()]
    args.pipeline = pipeline_settings(args.set)
    if shutil.which("sipp") is None:
        print("sip_calls: sipp is not installed (apt: sip-tester)", file=sys.stderr)
        return 1
    raise_fd_limit()
    args.pinned = not args.no_pin and pin(SERVER_CPU)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"SIP calls; server pinned to CPU {SERVER_CPU}, sipp to CPU {SIPP_CPU}: {args.pinned}; "
          f"{args.seconds:g} s measured per step; load average before: {load}", flush=True)
    result = asyncio.run(main_async(args))
    report(result, args)
    path = save(args.label, {"settings": {"calls": args.calls, "rate": args.rate, "seconds": args.seconds,
                                          "pipeline": args.pipeline,
                                           "repeat": args.repeat,
                                           "warmup": args.warmup, "pinned": args.pinned,
                                           "load_average_before": os.getloadavg()},
                              **result})
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
