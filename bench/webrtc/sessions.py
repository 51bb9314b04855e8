"""Benchmark: how many concurrent WebRTC calls one voicegate process carries (not a test).

    .venv/bin/python -m bench.webrtc.sessions [--sessions 10,20,40] [--seconds 15] [--profile]

For each N a fresh server process (this file with --serve: uvicorn, WHIP, the offline local agent,
espeak-ng, a speech-to-text stand-in that never decodes, no SIP, no memory) is pinned to CPU 0; this
process, pinned to CPU 1, dials N aiortc callers over POST /whip at --dial-rate calls per second. Each
caller sends a looping espeak-ng phrase (or a tone) as Opus encoded once at start, so the load
generator spends nothing on encoding, and receives and decodes the agent's audio. As nothing is ever
understood, the agent answers each utterance with its spoken apology (espeak-ng child processes,
pinned with the server): the agent talks part of the time and sends 20 ms of silence otherwise.

Measured over a steady window that starts --settle seconds after the last call is up:
- server CPU (psutil on the server pid: all threads, its event-loop thread alone, espeak-ng children);
- the gap between consecutive RTP packets of the agent's stream at the caller, as deviation from
  20 ms, p50/p99 over all callers (timestamped when a packet reaches aiortc's receiver, before the
  jitter buffer and the decoder thread), and the share of the 50 frames per second actually delivered;
- setup: POST /whip to ICE connected and to DTLS connected, p50/p95; failures (no 201, no connection).
A step passes with no failure, >= 99 % of frames delivered and a gap p99 deviation under --threshold-ms
(default 20: one whole frame late, about what a browser's adaptive jitter buffer absorbs without
growing its delay; the SIP target of 5 ms is for a bare RTP loop, while every WebRTC frame crosses
thread hops in aiortc). The callers' own CPU and event-loop lag are shown: past ~90 % of their core,
or with a lag p99 near the threshold, the callers are late, not the server. CPU 0's total busy time
shows other work sharing the server's core. --profile reruns the largest N with the server's event
loop under cProfile (CPU time) and prints where it goes, by package and by function.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fractions
import itertools
import os
import pstats
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Pin before anything starts a thread (numpy's BLAS, av, aiortc): threads inherit their creator's CPUs.
SERVER_CPU, CLIENT_CPU = 0, 1
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
if len(os.sched_getaffinity(0)) >= 2:
    os.sched_setaffinity(0, {SERVER_CPU if "--serve" in sys.argv else CLIENT_CPU})

import av  # noqa: E402
import httpx  # noqa: E402
import numpy as np  # noqa: E402
import psutil  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common.figures import cpu_busy_seconds, percentiles, progress, save, table  # noqa: E402
from voicegate.server.event_loop import event_loop_factory  # noqa: E402

FRAME_S = 0.020
OPUS_RATE = 48000
SAMPLES = 960
CONNECT_TIMEOUT_S = 30.0
VOICED_PEAK = 1000  # a decoded frame with a sample above this is speech, not the agent's silence


# ---- the server (child process) ------------------------------------------------------------------


def serve(port: int, data_dir: str, profile_out: str) -> None:
    import cProfile

    import uvicorn

    from tests.pipeline.conftest import ScriptedStt
    from voicegate.internal.config import load_config
    from voicegate.internal.llm.local import LocalAgent
    from voicegate.server.app import create_gateway_application

    config = load_config(None)
    config.server.host, config.server.port, config.server.data_dir = "127.0.0.1", port, data_dir
    config.server.whip_rate_per_min = 0
    # The bench measures the media path of the sessions it asks for: on a core of its own the node's
    # admission control (on by default) would refuse some of them (bench/capacity/overload.py measures that).
    config.admission.enabled = False
    config.sip.enabled = False
    config.webrtc.ice_hosts = ["127.0.0.1"]
    config.telemetry.log_level = "warning"
    app = create_gateway_application(config, stt=ScriptedStt([]), model=LocalAgent())  # type: ignore[arg-type]

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:  # SIGTERM and the profiler's signals are ours
            yield

    server = Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False,
                                   lifespan="on"))
    # CPU time of the event-loop thread, not wall time: waits for the GIL and for CPU 0 would otherwise
    # be charged to whatever C call released the GIL (SRTP, av) and hide where the CPU actually goes.
    profiler = cProfile.Profile(time.thread_time)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, lambda: setattr(server, "should_exit", True))
        loop.add_signal_handler(signal.SIGUSR1, profiler.enable)

        def stop_profile() -> None:
            profiler.disable()
            profiler.dump_stats(profile_out)

        loop.add_signal_handler(signal.SIGUSR2, stop_profile)
        await server.serve()

    with asyncio.Runner(loop_factory=event_loop_factory(os.environ.get("VOICEGATE_SERVER__EVENT_LOOP", ""))) as runner:
        runner.run(run())


class ServerProcess:
    """The server child: started, pinned, watched by psutil, stopped."""

    def __init__(self, directory: Path) -> None:
        from tests.conftest import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.profile_out = directory / "server.prof"
        self.log = directory / "server.log"
        self._log = self.log.open("wb")
        self.child = subprocess.Popen([sys.executable, __file__, "--serve", str(self.port), str(directory / "data"),
                                       str(self.profile_out)], stdout=self._log, stderr=subprocess.STDOUT,
                                      cwd=Path(__file__).resolve().parents[2])
        self.process = psutil.Process(self.child.pid)

    async def ready(self, http: httpx.AsyncClient) -> None:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.child.poll() is not None:
                raise RuntimeError(f"the server exited: {self.log.read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(f"{self.url}/health")).status_code == 200:
                    self.pin()
                    return
            await asyncio.sleep(0.2)
        raise TimeoutError("the server did not start")

    def pin(self) -> None:
        """Every thread of the server on SERVER_CPU (it pinned itself at start; threads made since inherit)."""
        if (os.cpu_count() or 1) >= 2:
            for thread in self.process.threads():
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(thread.id, {SERVER_CPU})

    def cpu(self) -> tuple[float, float, float]:
        """CPU seconds so far: (all threads, the event-loop thread, finished children: espeak-ng)."""
        times = self.process.cpu_times()
        main = next((t.user_time + t.system_time for t in self.process.threads() if t.id == self.child.pid), 0.0)
        return times.user + times.system, main, times.children_user + times.children_system

    def stop(self) -> None:
        if self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)
            try:
                self.child.wait(30)
            except subprocess.TimeoutExpired:
                self.child.kill()
                self.child.wait()
        self._log.close()




# ---- the callers (this process) ------------------------------------------------------------------


def caller_audio(kind: str) -> list[bytes]:
    """The caller's looping audio as Opus packets of 20 ms, encoded once for every caller."""
    from tests.speech import silence, speak, tone

    if kind == "tone":
        pcm = tone(1000, OPUS_RATE) + silence(600, OPUS_RATE)
    else:  # speech and pauses, so the server's VAD opens and closes utterances as with a person
        pcm = b"".join(speak(p, OPUS_RATE) + silence(900, OPUS_RATE)
                       for p in ("what time is it", "my name is sam", "keep your answers short"))
    return opus_packets(pcm)


def opus_packets(pcm: bytes) -> list[bytes]:
    """48 kHz mono PCM16 as Opus packets of 20 ms (a trailing part frame is left out)."""
    from aiortc.codecs.opus import OpusEncoder

    encoder, packets = OpusEncoder(), []
    step = SAMPLES * 2
    for offset in range(0, len(pcm) - step + 1, step):
        frame = av.AudioFrame.from_ndarray(np.frombuffer(pcm[offset:offset + step], np.int16).reshape(1, -1),
                                           format="s16", layout="mono")
        frame.sample_rate, frame.pts, frame.time_base = OPUS_RATE, offset // 2, fractions.Fraction(1, OPUS_RATE)
        payloads, _ = encoder.encode(frame)
        packets.extend(payloads)
    return packets


def caller_track(packets: list[bytes], start: int) -> Any:
    from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

    from voicegate.internal.evals.webrtc_phone import FramePacer

    class LoopingOpusTrack(MediaStreamTrack):
        """Pre-encoded Opus, one packet per 20 ms on the monotonic clock, from `start` round the loop."""

        kind = "audio"

        def __init__(self) -> None:
            super().__init__()
            self._index, self._pts, self._pacer = start, 0, FramePacer()

        async def recv(self) -> av.Packet:
            if self.readyState != "live":
                raise MediaStreamError
            await self._pacer.wait()
            packet = av.Packet(packets[self._index % len(packets)])
            packet.pts, packet.time_base = self._pts, fractions.Fraction(1, OPUS_RATE)
            self._index += 1
            self._pts += SAMPLES
            return packet

    return LoopingOpusTrack()


class Caller:
    """One aiortc caller: dials, timestamps every RTP packet of the agent's audio, decodes and counts it."""

    def __init__(self, packets: list[bytes], start: int, track: Any = None) -> None:
        from aiortc import RTCPeerConnection

        self.pc = RTCPeerConnection()
        self.pc.addTrack(track if track is not None else caller_track(packets, start))
        self.events = self.pc.createDataChannel("events")  # as the browser page does; its events come here
        self.arrivals: list[tuple[float, int]] = []  # (monotonic time, RTP sequence number)
        self.decoded = 0
        self.voiced: list[float] = []  # arrival times of decoded frames with speech in them
        self.posted_at = self.ice_at = self.connected_at = 0.0
        self.failure = ""
        self.location = ""
        self._tasks: list[asyncio.Task[None]] = []
        self.pc.on("track", self._on_track)
        self.pc.on("iceconnectionstatechange", self._on_ice)
        self.pc.on("connectionstatechange", self._on_state)

    def _on_ice(self) -> None:
        if self.pc.iceConnectionState in ("connected", "completed") and not self.ice_at:
            self.ice_at = time.monotonic()

    def _on_state(self) -> None:
        state = self.pc.connectionState
        if state == "connected" and not self.connected_at:
            self.connected_at = time.monotonic()
        elif state in ("failed", "closed") and not self.failure:
            self.failure = f"connection {state}"

    def _on_track(self, track: Any) -> None:
        self._tasks.append(asyncio.create_task(self._drain(track)))

    async def _drain(self, track: Any) -> None:
        from aiortc.mediastreams import MediaStreamError

        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            self.decoded += 1
            if int(np.abs(np.frombuffer(frame.planes[0], np.int16)).max()) > VOICED_PEAK:
                self.voiced.append(time.monotonic())

    def _record_rtp(self) -> None:
        receiver = next(t.receiver for t in self.pc.getTransceivers() if t.kind == "audio")
        original = receiver._handle_rtp_packet
        arrivals = self.arrivals

        async def recording(packet: Any, arrival_time_ms: int) -> None:
            arrivals.append((time.monotonic(), packet.sequence_number))
            await original(packet, arrival_time_ms=arrival_time_ms)

        receiver._handle_rtp_packet = recording  # type: ignore[method-assign]

    async def dial(self, http: httpx.AsyncClient) -> None:
        from aiortc import RTCSessionDescription

        try:
            await self.pc.setLocalDescription(await self.pc.createOffer())
            self._record_rtp()
            self.posted_at = time.monotonic()
            response = await http.post("/whip", content=self.pc.localDescription.sdp,
                                       headers={"Content-Type": "application/sdp"})
            if response.status_code != 201:
                self.failure = f"POST /whip {response.status_code}"
                return
            self.location = response.headers["location"]
            await self.pc.setRemoteDescription(RTCSessionDescription(response.text, "answer"))
            deadline = time.monotonic() + CONNECT_TIMEOUT_S
            while not self.connected_at and not self.failure:
                if time.monotonic() > deadline:
                    self.failure = "not connected in time"
                    return
                await asyncio.sleep(0.01)
        except Exception as exc:  # a caller that breaks is a failure to count, not a reason to stop
            self.failure = f"{type(exc).__name__}: {exc}"[:120]

    async def hang_up(self, http: httpx.AsyncClient) -> None:
        if self.location:
            with contextlib.suppress(httpx.HTTPError):
                await http.delete(self.location)
        await self.pc.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def window(self, start: float, end: float) -> tuple[list[float], int, int]:
        """(gap deviations in ms, packets received, packets lost) between start and end."""
        inside = [(at, seq) for at, seq in self.arrivals if start <= at <= end]
        deviations, lost = [], 0
        for (at0, seq0), (at1, seq1) in itertools.pairwise(inside):
            step = (seq1 - seq0) % 65536
            if step == 1:
                deviations.append(abs((at1 - at0) - FRAME_S) * 1000)
            elif 1 < step < 1000:
                lost += step - 1
        return deviations, len(inside), lost


async def loop_lag(samples: list[tuple[float, float]], stop: asyncio.Event) -> None:
    """How late this process's event loop wakes for a 20 ms timer: the callers' own lateness."""
    while not stop.is_set():
        started = time.monotonic()
        await asyncio.sleep(FRAME_S)
        samples.append((started, (time.monotonic() - started - FRAME_S) * 1000))


async def run_step(sessions: int, args: argparse.Namespace, packets: list[bytes], profile: bool) -> dict[str, Any]:
    """N calls against a fresh server: dial, settle, measure a steady window, hang up."""
    label = f"N={sessions}"
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="voicegate-webrtc-bench-") as directory:
        server = ServerProcess(Path(directory))
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(base_url=server.url, timeout=60, limits=limits) as http:
            try:
                await server.ready(http)
                callers = [Caller(packets, random.Random(n).randrange(len(packets))) for n in range(sessions)]
                stop = asyncio.Event()
                lag: list[tuple[float, float]] = []
                lag_task = asyncio.create_task(loop_lag(lag, stop))
                dials = []
                for n, caller in enumerate(callers):  # arrivals at --dial-rate calls per second
                    dials.append(asyncio.create_task(caller.dial(http)))
                    progress(f"{label} dialling", n + 1, sessions)
                    await asyncio.sleep(1.0 / args.dial_rate)
                await asyncio.gather(*dials)
                server.pin()  # threads the calls started (aiortc's encoder pool)
                await asyncio.sleep(args.settle)
                figures = await measure_window(server, callers, lag, args, label, profile)
                stop.set()
                await lag_task
                await asyncio.gather(*(c.hang_up(http) for c in callers))
            finally:
                server.stop()
            errors = [line for line in server.log.read_text(errors="replace").splitlines()
                      if "ERROR" in line or "Traceback" in line]
            figures["server_log_errors"] = {"count": len(errors), "first": errors[:3]}
            if profile:
                figures["profile"] = profile_top(server.profile_out)
    figures["loadavg_before"], figures["loadavg_after"] = list(load_before), list(os.getloadavg())
    return figures


async def measure_window(server: ServerProcess, callers: list[Caller], lag: list[tuple[float, float]],
                         args: argparse.Namespace, label: str, profile: bool) -> dict[str, Any]:
    me = psutil.Process()
    if profile:
        server.child.send_signal(signal.SIGUSR1)
    start = time.monotonic()
    cpu0, (server0, loop0, tts0), mine0 = cpu_busy_seconds(SERVER_CPU), server.cpu(), me.cpu_times()
    for second in range(int(args.seconds)):
        await asyncio.sleep(1.0)
        progress(f"{label} measuring", second + 1, int(args.seconds))
    end = time.monotonic()
    cpu1, (server1, loop1, tts1), mine1 = cpu_busy_seconds(SERVER_CPU), server.cpu(), me.cpu_times()
    if profile:
        server.child.send_signal(signal.SIGUSR2)
        await asyncio.sleep(2)
    wall = end - start
    ok = [c for c in callers if not c.failure]
    deviations: list[float] = []
    received = lost = voiced = 0
    for caller in ok:
        gaps, count, missing = caller.window(start, end)
        deviations += gaps
        received, lost = received + count, lost + missing
        voiced += sum(1 for at in caller.voiced if start <= at <= end)
    failures = [c.failure for c in callers if c.failure]
    setup_ice = [(c.ice_at - c.posted_at) * 1000 for c in ok if c.ice_at]
    setup = [(c.connected_at - c.posted_at) * 1000 for c in ok]
    server_pct = (server1 - server0) / wall * 100
    connected = max(1, len(ok))
    return {
        "sessions": len(callers), "connected": len(ok), "failed": len(failures), "failures": sorted(set(failures)),
        "window_s": round(wall, 2),
        "setup_ice_ms": percentiles(setup_ice, (50, 95)), "setup_connected_ms": percentiles(setup, (50, 95)),
        "gap_deviation_ms": percentiles(deviations, (50, 99, 100)), "gaps": len(deviations),
        "packets_received": received, "packets_lost": lost,
        "loss_pct": 100 * lost / max(1, received + lost),
        # Frames the callers got of the 50 per second the server owes each; an overloaded server's pacer
        # skips ahead (tracks.MAX_LAG_S) instead of sending late frames, so this, not loss, shows it.
        "delivered_pct": 100 * received / max(1.0, len(ok) * wall / FRAME_S),
        "agent_speaking_pct": 100 * voiced / max(1, received),
        "server_cpu_pct": server_pct, "server_cpu_per_session_pct": server_pct / connected,
        "server_loop_thread_pct": (loop1 - loop0) / wall * 100,
        "tts_children_cpu_pct": (tts1 - tts0) / wall * 100,
        "cpu0_busy_pct": (cpu1 - cpu0) / wall * 100,
        "client_cpu_pct": (mine1.user + mine1.system - mine0.user - mine0.system) / wall * 100,
        "client_loop_lag_ms": percentiles([v for at, v in lag if start <= at <= end], (50, 99)),
        "callers_heard_agent": sum(1 for c in ok if c.voiced),
    }


def package_of(file: str) -> str:
    """Where a profiled function lives: a site-packages package, a voicegate package, asyncio, or C."""
    if file == "~":
        return "C calls (av, numpy, sockets, builtins)"
    for marker, prefix in (("site-packages/", ""), ("/internal/", "internal/"), ("/server/", "server/"),
                           ("python3.11/", "stdlib/")):
        if marker in file:
            return prefix + file.split(marker, 1)[1].split("/", 1)[0].removesuffix(".py")
    return Path(file).name


def profile_top(path: Path, count: int = 15) -> dict[str, list[dict[str, Any]]]:
    """The top functions by own CPU time, and own CPU time summed by package (C calls by their caller's)."""
    if not path.exists():
        return {"functions": [], "packages": []}
    entries = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in entries.values()) or 1.0
    rows = sorted(entries.items(), key=lambda item: item[1][2], reverse=True)[:count]
    packages: dict[str, float] = {}
    for (file, _line, _name), values in entries.items():
        # A C function's time goes to the packages that called it (av's resampler to internal/audio...).
        shares = [(package_of(caller[0]), edge[2]) for caller, edge in values[4].items()] if file == "~" else []
        for package, own in shares or [(package_of(file), values[2])]:
            packages[package] = packages.get(package, 0.0) + own
    return {
        "functions": [{"function": f"{Path(file).name}:{line}({name})", "calls": nc, "own_s": round(tt, 3),
                       "own_pct": round(100 * tt / total, 1), "cum_s": round(ct, 3)}
                      for (file, line, name), (_cc, nc, tt, ct, _callers) in rows],
        "packages": [{"package": k, "own_s": round(v, 3), "own_pct": round(100 * v / total, 1)}
                     for k, v in sorted(packages.items(), key=lambda item: item[1], reverse=True)[:count]],
    }


def row(step: dict[str, Any]) -> list[str]:
    gap, ice, conn = step["gap_deviation_ms"], step["setup_ice_ms"], step["setup_connected_ms"]
    return [str(step["sessions"]), str(step["connected"]), str(step["failed"]),
            f"{ice['p50']:.0f}/{ice['p95']:.0f}", f"{conn['p50']:.0f}/{conn['p95']:.0f}",
            f"{gap['p50']:.2f}/{gap['p99']:.1f}", f"{step['delivered_pct']:.1f}", f"{step['loss_pct']:.2f}",
            f"{step['server_cpu_pct']:.0f}", f"{step['server_cpu_per_session_pct']:.2f}",
            f"{step['server_loop_thread_pct']:.0f}", f"{step['tts_children_cpu_pct']:.0f}",
            f"{step['cpu0_busy_pct']:.0f}", f"{step['client_cpu_pct']:.0f}",
            f"{step['client_loop_lag_ms']['p99']:.1f}"]


HEADER = ["N", "up", "fail", "ICE p50/p95 ms", "DTLS p50/p95 ms", "gap dev p50/p99 ms", "delivered %", "loss %",
          "server CPU %", "per call %", "loop thr %", "espeak %", "cpu0 busy %", "caller CPU %", "caller lag p99"]
MIN_DELIVERED_PCT = 99.0


def passes(step: dict[str, Any], threshold_ms: float) -> bool:
    return bool(step["failed"] == 0 and step["delivered_pct"] >= MIN_DELIVERED_PCT
                and step["gap_deviation_ms"]["p99"] < threshold_ms)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", default="10,20,40", help="comma-separated numbers of concurrent calls")
    parser.add_argument("--seconds", type=float, default=15, help="length of the steady window per step")
    parser.add_argument("--settle", type=float, default=6, help="wait after the last call is up (greetings)")
    parser.add_argument("--dial-rate", type=float, default=10, help="new calls per second while dialling")
    parser.add_argument("--audio", choices=["speech", "tone"], default="speech")
    parser.add_argument("--threshold-ms", type=float, default=20.0)
    parser.add_argument("--profile", action="store_true", help="rerun the largest N under cProfile")
    parser.add_argument("--label", default="webrtc_sessions",
                        help="name of the results file (pipeline settings come from VOICEGATE_PIPELINE__* variables)")
    args = parser.parse_args()
    from voicegate.internal.peer.ice import configure_ice_hosts

    configure_ice_hosts(["127.0.0.1"])  # the callers too: aioice would otherwise offer only non-loopback hosts
    packets = caller_audio(args.audio)
    counts = [int(s) for s in args.sessions.split(",")]
    results: dict[str, Any] = {"threshold_ms": args.threshold_ms, "audio": args.audio, "window_s": args.seconds,
                               "dial_rate_per_s": args.dial_rate, "pinned": len(os.sched_getaffinity(0)) == 1,
                               "loadavg_start": list(os.getloadavg()), "steps": []}
    for n in counts:
        step = await run_step(n, args, packets, profile=False)
        results["steps"].append(step)
        print(table([row(step)], HEADER), file=sys.stderr, flush=True)
    passing = [s["sessions"] for s in results["steps"] if passes(s, args.threshold_ms)]
    results["largest_passing"] = max(passing) if passing else 0
    results["loadavg_end"] = list(os.getloadavg())
    print(table([row(s) for s in results["steps"]], HEADER))
    print(f"largest N with no failure, >= {MIN_DELIVERED_PCT:g} % of frames delivered and gap p99 deviation "
          f"< {args.threshold_ms:g} ms: "
          f"{results['largest_passing'] or 'none'}" + (" (the largest tried)" if passing and
                                                        max(passing) == max(counts) else ""))
    print("load average (1/5/15 min) at start {:.2f}/{:.2f}/{:.2f}, at end {:.2f}/{:.2f}/{:.2f}".format(
        *results["loadavg_start"], *results["loadavg_end"]))
    if args.profile:
        profiled = await run_step(max(counts), args, packets, profile=True)
        top = profiled.pop("profile")
        results["profile"] = {"sessions": max(counts), **top, "figures_under_profiler": profiled}
        print(f"\nserver event-loop thread at N={max(counts)} under cProfile (CPU time), by package and by function:")
        print(table([[p["package"], f"{p['own_s']:.2f}", f"{p['own_pct']:.1f}"] for p in top["packages"]],
                    ["package", "own s", "own %"]))
        print(table([[p["function"], str(p["calls"]), f"{p['own_s']:.2f}", f"{p['own_pct']:.1f}", f"{p['cum_s']:.2f}"]
                     for p in top["functions"]], ["function", "calls", "own s", "own %", "cum s"]))
    results["pipeline"] = {k: v for k, v in os.environ.items() if k.startswith("VOICEGATE_PIPELINE__")}
    print(f"results: {save(args.label, results)}")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    else:
        asyncio.run(main())
