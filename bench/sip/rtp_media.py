"""Benchmark: how many RtpSessions one server process paces well (not a test).

The server side (this process) runs N real `RtpSession`s on one `PacedScheduler`, each sending a G.711
tone and receiving the load generator's stream through its jitter buffer. The load generator (a second
process started from this file with --loadgen, plain Python and raw sockets) sends 172-byte packets
every 20 ms per call and timestamps the server's packets in the kernel (SO_TIMESTAMPNS), so its own
scheduling delays do not pollute the send-interval figures. With two or more CPUs the server is pinned
to CPU 0 and the load generator to CPU 1, as in the team's measured limits (MEDIA-PERFORMANCE).

`--bare` runs the bare media loop of those measurements instead (same scheduler and sockets, no RTP
parsing, codec, jitter buffer, DTMF, RTCP or statistics): the ceiling on the machine at hand, so a
loaded or slower machine can be told apart from a slower session.

    .venv/bin/python -m bench.sip.rtp_media --calls 100,200,400 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

# numpy's OpenBLAS threads would spin on the server's core for nothing: the media path does no BLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common.figures import cpu_busy_seconds, pin, raise_fd_limit
from voicegate.internal.audio.g711 import PCMU
from voicegate.internal.audio.rtp_session import RtpPortAllocator, RtpSession, RtpStats
from voicegate.internal.audio.scheduler import PacedScheduler

SO_TIMESTAMPNS = 35  # Linux; not exported by Python's socket module
TIMESPEC = struct.Struct("@qq")
PERIOD = 0.020
LOADGEN_PHASES = 10  # the load generator spreads its calls over 10 send phases of 2 ms








# -- load generator (child process) ----------------------------------------------------------------


def run_loadgen(ports: list[int], warmup: float, seconds: float) -> dict[str, Any]:
    """Send to every port, record when the server's packets arrive; return the figures as a dict."""
    calls = len(ports)
    socks = []
    kernel_stamps = True
    for _ in ports:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:
            kernel_stamps = False
        socks.append(sock)
    index_of = {sock.fileno(): i for i, sock in enumerate(socks)}
    poller = select.epoll()
    for sock in socks:
        poller.register(sock.fileno(), select.EPOLLIN)
    payload = bytes([0xFF]) * 160
    seq = [0] * calls
    last_arrival = [0.0] * calls
    first_seq: list[int | None] = [None] * calls
    last_seq = [0] * calls
    received = [0] * calls
    gaps: list[float] = []
    send_late: list[float] = []
    wall_offset = time.time() - time.monotonic()

    start = time.monotonic() + 0.05
    measure_from = start + warmup
    stop = measure_from + seconds
    next_tick = [start + p * PERIOD / LOADGEN_PHASES for p in range(LOADGEN_PHASES)]
    groups = [list(range(p, calls, LOADGEN_PHASES)) for p in range(LOADGEN_PHASES)]
    print("ready", flush=True)
    while True:
        now = time.monotonic()
        if now >= stop:
            break
        for phase in range(LOADGEN_PHASES):
            if next_tick[phase] <= now:
                if now >= measure_from:
                    send_late.append(now - next_tick[phase])
                for i in groups[phase]:
                    header = struct.pack("!BBHII", 0x80, PCMU, seq[i] & 0xFFFF, (seq[i] * 160) & 0xFFFFFFFF, i + 1)
                    try:
                        socks[i].sendto(header + payload, ("127.0.0.1", ports[i]))
                    except OSError:
                        pass
                    seq[i] += 1
                next_tick[phase] += PERIOD
                if next_tick[phase] < now - PERIOD:  # a stall: resynchronise instead of bursting
                    next_tick[phase] = now + PERIOD
        timeout = max(min(next_tick) - time.monotonic(), 0)
        for fd, _ in poller.poll(timeout):
            i = index_of[fd]
            sock = socks[i]
            while True:
                try:
                    data, ancillary, _, _ = sock.recvmsg(2048, 64)
                except BlockingIOError:
                    break
                arrival = time.monotonic()
                for level, kind, value in ancillary:
                    if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= TIMESPEC.size:
                        sec, nsec = TIMESPEC.unpack_from(value)
                        arrival = sec + nsec * 1e-9 - wall_offset
                if len(data) < 12 or data[1] & 0x7F != PCMU:
                    continue  # RTCP meant for a neighbouring port (ours are adjacent), or junk
                if arrival < measure_from:
                    last_arrival[i] = arrival
                    continue
                packet_seq = struct.unpack_from("!H", data, 2)[0]
                if first_seq[i] is None:
                    first_seq[i] = packet_seq
                    last_seq[i] = packet_seq
                else:
                    delta = (packet_seq - last_seq[i]) & 0xFFFF
                    if delta < 0x8000:
                        last_seq[i] += delta
                if last_arrival[i]:
                    gaps.append(abs(arrival - last_arrival[i] - PERIOD) * 1000)
                last_arrival[i] = arrival
                received[i] += 1
    for sock in socks:
        sock.close()
    expected = sum(last_seq[i] - (first_seq[i] or 0) + 1 for i in range(calls) if first_seq[i] is not None)
    deviation = np.array(gaps) if gaps else np.zeros(1)
    late = np.array(send_late) * 1000 if send_late else np.zeros(1)
    return {
        "kernel_timestamps": kernel_stamps,
        "gap_dev_p50_ms": float(np.percentile(deviation, 50)),
        "gap_dev_p99_ms": float(np.percentile(deviation, 99)),
        "gap_dev_max_ms": float(deviation.max()),
        "received": sum(received),
        "expected": expected,
        "silent_calls": sum(1 for f in first_seq if f is None),
        "loadgen_send_late_p99_ms": float(np.percentile(late, 99)),
    }


def loadgen_main() -> None:
    raise_fd_limit()
    config = json.loads(sys.stdin.readline())
    if config["pin"]:
        pin(1)
    result = run_loadgen(config["ports"], config["warmup"], config["seconds"])
    print(json.dumps(result), flush=True)


# -- server (this process) -------------------------------------------------------------------------


def tone_frame() -> bytes:
    t = np.arange(160) / 8000
    return (8000 * np.sin(2 * np.pi * 400 * t)).astype("<i2").tobytes()


class BareSession:
    """The bare media loop (the measured limits' best design), as this machine's own ceiling:
    same scheduler and sockets, but no parsing, codec, jitter buffer, DTMF, RTCP or statistics."""

    def __init__(self, allocator: RtpPortAllocator, scheduler: PacedScheduler) -> None:
        self._allocator = allocator
        self._pair = allocator.allocate("127.0.0.1")
        self.local_port = self._pair.port
        self._scheduler = scheduler
        self._remote: tuple[str, int] | None = None
        self._packet = bytes([0x80, PCMU]) + bytes(10) + bytes([0xFF]) * 160
        self._seq = 0

    def start(self, remote: tuple[str, int] | None) -> None:
        asyncio.get_running_loop().add_reader(self._pair.rtp.fileno(), self._readable)
        self._stream = self._scheduler.add(self._tick)

    def _readable(self) -> None:
        while True:
            try:
                _, self._remote = self._pair.rtp.recvfrom(2048)
            except BlockingIOError:
                return

    def _tick(self) -> None:
        if self._remote is not None:
            self._seq = (self._seq + 1) & 0xFFFF
            self._pair.rtp.sendto(self._packet[:2] + self._seq.to_bytes(2, "big") + self._packet[4:], self._remote)

    def stats(self) -> RtpStats:
        return RtpStats(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, None)

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self._pair.rtp.fileno())
        self._scheduler.remove(self._stream)
        self._allocator.release(self._pair)


async def run_step(
    calls: int, seconds: float, warmup: float, port_base: int, pinned: bool, bare: bool
) -> dict[str, Any]:
    scheduler = PacedScheduler()
    allocator = RtpPortAllocator(port_base, port_base + 2 * calls + 200)
    frame = tone_frame()
    frames_heard = [0]

    def sink(pcm: bytes) -> None:
        frames_heard[0] += 1

    sessions: list[RtpSession] | list[BareSession]
    if bare:
        sessions = [BareSession(allocator, scheduler) for _ in range(calls)]
    else:
        sessions = [
            RtpSession(
                local_host="127.0.0.1", allocator=allocator, scheduler=scheduler, payload_type=PCMU,
                dtmf_payload_type=101, symmetric=True, timeout_s=60.0, jitter_ms=40,
                source=lambda: frame, sink=sink, on_dtmf=lambda digit: None, on_timeout=lambda: None,
            )
            for _ in range(calls)
        ]
    for session in sessions:
        session.start(None)  # symmetric RTP: answer wherever the load generator sends from
    child = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--loadgen", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None
    config = {"ports": [s.local_port for s in sessions], "warmup": warmup, "seconds": seconds, "pin": pinned}
    child.stdin.write((json.dumps(config) + "\n").encode())
    await child.stdin.drain()
    assert (await child.stdout.readline()).strip() == b"ready"
    await asyncio.sleep(0.05 + warmup)
    cpu0, wall0, core0 = time.process_time(), time.monotonic(), cpu_busy_seconds(0)
    await asyncio.sleep(seconds)
    cpu = time.process_time() - cpu0
    wall = time.monotonic() - wall0
    # What else ran on the server's core meanwhile: on a shared machine this is why figures move.
    others = max(cpu_busy_seconds(0) - core0 - cpu, 0.0) if pinned else float("nan")
    result = json.loads(await child.stdout.readline())
    await child.wait()
    stats = [s.stats() for s in sessions]
    for session in sessions:
        session.close()
    scheduler.close()
    cpu_percent = 100 * cpu / wall
    return {
        "calls": calls,
        "cpu_percent": cpu_percent,
        "cpu_percent_per_call": cpu_percent / calls,
        "others_on_core_percent": 100 * others / wall,
        "server_send_p99_ms": float(np.percentile([s.send_jitter_p99_ms for s in stats], 99)),
        "to_server_lost": sum(s.lost for s in stats),
        "to_server_late": sum(s.late for s in stats),
        "to_server_received": sum(s.packets_received for s in stats),
        **result,
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    header = (
        f"{'calls':>6} {'CPU %':>7} {'CPU %/call':>10} {'others %':>8} {'gap p50':>8} {'gap p99':>8} {'gap max':>8} "
        f"{'srv p99':>8} {'lost ->srv':>10} {'lost srv->':>10} {'late':>6} {'lg late p99':>11}"
    )
    print()
    print("send-interval deviation from 20 ms at the receiver, ms (gap), server-measured p99 (srv p99);")
    print("others %: CPU time other processes and interrupts took on the server's core during the step")
    print(header)
    print("-" * len(header))
    for r in rows:
        lost_from = r["expected"] - r["received"]
        print(
            f"{r['calls']:>6} {r['cpu_percent']:>7.1f} {r['cpu_percent_per_call']:>10.3f} "
            f"{r['others_on_core_percent']:>8.1f} "
            f"{r['gap_dev_p50_ms']:>8.2f} {r['gap_dev_p99_ms']:>8.2f} {r['gap_dev_max_ms']:>8.1f} "
            f"{r['server_send_p99_ms']:>8.2f} {r['to_server_lost']:>10} {lost_from:>10} "
            f"{r['to_server_late']:>6} {r['loadgen_send_late_p99_ms']:>11.2f}"
        )


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for calls in args.calls:
        row = await run_step(calls, args.seconds, args.warmup, args.port_base, args.pinned, args.bare)
        rows.append(row)
        verdict = "ok" if row["gap_dev_p99_ms"] < 5 and row["expected"] == row["received"] else "over the limit"
        print(
            f"[{calls} calls] CPU {row['cpu_percent']:.1f}% ({row['cpu_percent_per_call']:.3f}%/call), "
            f"send gap p99 {row['gap_dev_p99_ms']:.2f} ms, lost {row['to_server_lost']}/"
            f"{row['expected'] - row['received']} (to/from server): {verdict}",
            flush=True,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", default="100,200,400", help="comma-separated call counts, one step each")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per step")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before measuring")
    parser.add_argument("--port-base", type=int, default=40000, help="first RTP port of the server")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    parser.add_argument("--no-pin", action="store_true", help="let the OS place both processes")
    parser.add_argument("--bare", action="store_true", help="measure a bare media loop instead (the ceiling)")
    parser.add_argument("--loadgen", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loadgen:
        loadgen_main()
        return
    args.calls = [int(c) for c in args.calls.split(",") if c.strip()]
    raise_fd_limit()
    args.pinned = not args.no_pin and pin(0)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"{'BARE media loop (baseline)' if args.bare else 'RtpSession'}; "
        f"server pinned to CPU 0, load generator to CPU 1: {args.pinned}; {args.seconds:g} s per step; "
        f"load average before: {load}",
        flush=True,
    )
    rows = asyncio.run(main_async(args))
    print_table(rows)
    if not all(r["kernel_timestamps"] for r in rows):
        print("note: no kernel receive timestamps; gaps include the load generator's own delays")
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
