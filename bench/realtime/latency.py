"""Benchmark: the latency voicegate adds between the wire and a Realtime model, both ways (the target:
p95 <= 30 ms each way), on a real SIP call and a real WebRTC call. Not a test.

A real `voicegate serve` process answers with the Realtime agent (`[realtime] enabled`), pointed at the fake
Realtime server (tests/fakes/realtime_fake.py) in `stub` mode, which answers each turn at once with a fixed
tone burst: what is left is voicegate's own time. The caller marks its audio: silence, then a 440 Hz tone
whose onset is found by energy on both sides.

- inbound: the phone sends the RTP packet carrying the tone's onset (SIP: a raw UDP socket, the time of
  `sendto`; WebRTC: aiortc's sender taking the frame to encode) -> the fake receives the first
  `input_audio_buffer.append` whose audio is loud (the time its message is read off the socket).
- outbound: the fake sends a response's first `response.output_audio.delta` -> the phone receives the first
  loud RTP packet (SIP: the time the datagram is read; WebRTC: the packet's arrival at aiortc's receiver,
  before its jitter buffer and decoder, bench/turns/voice_to_voice_webrtc.py's `WireClock`).

Every clock is this machine's CLOCK_MONOTONIC (the server is another process on the same machine). The
server runs the deployment defaults but for the test-only settings (no greeting, no memory, no idle prompt,
silence_ms = 200 so turns are quick).

    .venv/bin/python -m bench.realtime.latency --turns 30
    .venv/bin/python -m bench.realtime.latency --transports sip --turns 5 --set sip.jitter_ms=20
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common.figures import percentiles, save, table
from bench.realtime.phones import QUIET_DBFS, SipRtpPhone, WebRtcTonePhone, dbfs, tone
from bench.turns.voice_to_voice import parse_setting, server_settings, voicegate, webrtc_settings
from tests.fakes.realtime_fake import FakeRealtime
from tests.fakes.realtime_session import RealtimeConnection

TARGET_MS = 30.0
TONE_S = 0.3  # the caller's "turn": long enough for the fake's VAD (40 ms) to call it speech
QUIET_S = 0.4  # the reply is over once the phone has heard this long of silence after it
TURN_TIMEOUT_S = 10.0
LOUD_DBFS = -35.0  # a tone frame (-13 dBFS sent, -20 dBFS the stub's burst) is far above; idle audio far below


class TimedFake(FakeRealtime):
    """The fake, noting when each append arrived (with its level) and when each reply's first delta left."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(stub=True, **kwargs)
        self.appends: list[tuple[float, float]] = []  # (read at, dBFS)
        self.first_deltas: list[float] = []  # when each audio item's first delta was handed to the socket
        self._items_seen: set[str] = set()

    def _record(self, event: dict[str, Any]) -> None:
        if event.get("type") == "input_audio_buffer.append":
            at = time.monotonic()
            self.appends.append((at, dbfs(base64.b64decode(event.get("audio") or ""))))
        super()._record(event)

    async def send(self, conn: RealtimeConnection, event: dict[str, Any]) -> None:
        if event.get("type") == "response.output_audio.delta" and event.get("item_id") not in self._items_seen:
            self._items_seen.add(str(event.get("item_id")))
            self.first_deltas.append(time.monotonic())
        await super().send(conn, event)


@dataclass
class Samples:
    inbound: list[float] = field(default_factory=list)  # ms
    outbound: list[float] = field(default_factory=list)
    lost: int = 0  # turns whose onset was not found on the other side


def first_loud_after(frames: list[tuple[float, float]], moment: float, within_s: float = 2.0) -> float | None:
    return next((at for at, level in frames if moment <= at <= moment + within_s and level > LOUD_DBFS), None)


def pair_up(onsets: list[float], arrivals: list[tuple[float, float]]) -> tuple[list[float], int]:
    """Each onset's latency (ms) to the first loud frame after it on the other side; the count not found."""
    found, lost = [], 0
    for onset in onsets:
        at = first_loud_after(arrivals, onset)
        if at is None:
            lost += 1
        else:
            found.append((at - onset) * 1000)
    return found, lost


async def wait_quiet(phone: SipRtpPhone | WebRtcTonePhone, since: float, quiet_s: float, timeout_s: float) -> bool:
    """Until the phone has heard `quiet_s` of silence after something loud since `since` (the reply), or
    `timeout_s`: False when no reply was heard at all."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        loud = [at for at, level in phone.heard if at >= since and level > QUIET_DBFS]
        if loud and time.monotonic() - loud[-1] >= quiet_s:
            return True
        await asyncio.sleep(0.02)
    return False


async def run_turns(phone: SipRtpPhone | WebRtcTonePhone, fake: TimedFake, turns: int, label: str) -> Samples:
    onsets: list[float] = []
    await asyncio.sleep(1.0)  # the media settles (and a greeting, if one were set, is over)
    for turn in range(turns):
        began = time.monotonic()
        onsets.append(await phone.say(tone(TONE_S, phone.rate)))
        if not await wait_quiet(phone, began, QUIET_S, TURN_TIMEOUT_S):
            print(f"  {label}: turn {turn + 1}: no reply heard", file=sys.stderr)
        print(f"  {label}: turn {turn + 1}/{turns}", file=sys.stderr, flush=True)
    await asyncio.sleep(0.2)
    inbound, lost_in = pair_up(onsets, fake.appends)
    outbound, lost_out = pair_up(list(fake.first_deltas), phone.heard)
    return Samples(inbound, outbound, lost_in + lost_out)


async def sip_call(settings: dict[str, dict[str, Any]], work: Path, fake: TimedFake, turns: int) -> Samples:
    with voicegate(work, settings) as server:
        host, port = server.sip
        phone = SipRtpPhone("127.0.0.1")
        await phone.dial(f"sip:agent@{host}:{port}")
        try:
            return await run_turns(phone, fake, turns, "sip")
        finally:
            await phone.hang_up()


async def webrtc_call(settings: dict[str, dict[str, Any]], work: Path, fake: TimedFake, turns: int) -> Samples:
    with voicegate(work, settings):
        phone = WebRtcTonePhone()
        await phone.dial(f"http://127.0.0.1:{settings['server']['port']}")
        try:
            return await run_turns(phone, fake, turns, "webrtc")
        finally:
            await phone.hang_up()


def realtime_settings(fake_url: str, transport: str, data_dir: Path,
                      overrides: list[tuple[str, str, Any]]) -> dict[str, dict[str, Any]]:
    base = webrtc_settings if transport == "webrtc" else server_settings
    settings = base(data_dir, "whisper", None, [])
    settings["realtime"] = {"enabled": True, "url": fake_url, "api_key": "bench-key", "silence_ms": 200}
    for section, key, value in overrides:
        settings.setdefault(section, {})[key] = value
    return settings


async def measure(transports: list[str], turns: int, overrides: list[tuple[str, str, Any]]) -> dict[str, Samples]:
    results: dict[str, Samples] = {}
    async with TimedFake() as fake:
        for transport in transports:
            fake.appends.clear()
            fake.first_deltas.clear()
            with tempfile.TemporaryDirectory(prefix=f"bench-realtime-{transport}-") as tmp:
                work = Path(tmp)
                settings = realtime_settings(fake.url, transport, work / "data", overrides)
                call = sip_call if transport == "sip" else webrtc_call
                print(f"{transport}: starting voicegate and calling it", file=sys.stderr, flush=True)
                results[transport] = await call(settings, work, fake, turns)
    return results


def figures(samples: Samples) -> dict[str, Any]:
    out: dict[str, Any] = {"lost": samples.lost}
    for direction in ("inbound", "outbound"):
        values: list[float] = getattr(samples, direction)
        stats = percentiles(values, (50, 95))
        out[direction] = {"n": len(values), "p50": stats["p50"], "p95": stats["p95"],
                          "max": max(values) if values else float("nan"),
                          "mean": float(np.mean(values)) if values else float("nan")}
    return out


def report(results: dict[str, dict[str, Any]]) -> str:
    rows = []
    for transport, result in results.items():
        for direction in ("inbound", "outbound"):
            f = result[direction]
            verdict = "ok" if f["p95"] <= TARGET_MS else "OVER"
            rows.append([transport, direction, str(f["n"]), f"{f['p50']:.1f}", f"{f['p95']:.1f}", f"{f['max']:.1f}",
                         f"{verdict} (p95 <= {TARGET_MS:.0f})"])
    return table(rows, ["transport", "direction", "n", "p50 ms", "p95 ms", "max ms", "target"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transports", default="sip,webrtc", help="comma-separated: sip, webrtc")
    parser.add_argument("--turns", type=int, default=30, help="turns per call (one sample each way per turn)")
    parser.add_argument("--set", action="append", default=[], type=parse_setting, metavar="SECTION.KEY=VALUE",
                        help="any config key for the server, e.g. sip.jitter_ms=20 (repeatable)")
    parser.add_argument("--name", default="realtime-latency", help="bench/results/NAME.json")
    args = parser.parse_args(argv)
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    unknown = set(transports) - {"sip", "webrtc"}
    if unknown:
        parser.error(f"unknown transport(s): {', '.join(sorted(unknown))}")
    samples = asyncio.run(measure(transports, args.turns, args.set))
    results = {transport: figures(s) for transport, s in samples.items()}
    print("\nadded latency, wire <-> Realtime model stub (ms)")
    print(report(results))
    for transport, result in results.items():
        if result["lost"]:
            print(f"{transport}: {result['lost']} onset(s) not found on the other side")
    path = save(args.name, {"turns": args.turns, "settings": [list(s) for s in args.set], "results": results,
                            "samples": {t: {"inbound": s.inbound, "outbound": s.outbound} for t, s in samples.items()}})
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
