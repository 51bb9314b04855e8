"""The WebRTC callers of bench/capacity/conversations.py: aiortc peers that dial POST /whip as bench/webrtc/sessions.py
does, speak a script of Piper questions in real time and time both directions at the caller.

A caller's script (the same questions and silences as the SIP callers', at 48 kHz) is Opus-encoded once
before the step, so encoding costs the load generator nothing during it; its track hands aiortc one packet
every 20 ms and keeps, for each, the time it was handed out and the level of the audio in it. Every frame
of the agent's audio is decoded (aiortc's receiver: jitter buffer, Opus) and kept with the time it came
out and its level. Both lists are (monotonic time, dBFS), which bench.turns.voice_to_voice.measure turns into
voice-to-voice waits exactly as it does for the SIP tap's packets. The server's events on the DataChannel
give the transcript (user finals, `replaces` honoured) and, with pipeline.debug, each turn's stages.
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import json
import math
import os
import time
from dataclasses import dataclass
from typing import Any

import av
import httpx
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

# bench/webrtc/sessions.py pins its importer to one CPU and sets OPENBLAS_NUM_THREADS for its own layout
# (server and callers on a core each); here the server this process starts must inherit all of them.
_CPUS, _BLAS = os.sched_getaffinity(0), os.environ.get("OPENBLAS_NUM_THREADS")
from bench.webrtc.sessions import OPUS_RATE, SAMPLES, Caller, opus_packets  # noqa: E402
from voicegate.internal.evals.replies import transcript_line  # noqa: E402
from voicegate.internal.evals.webrtc_phone import FramePacer  # noqa: E402

os.sched_setaffinity(0, _CPUS)
if _BLAS is None:
    os.environ.pop("OPENBLAS_NUM_THREADS", None)

HANG_UP_AFTER_S = 1.5  # after the script's last packet: the reply to the last question is within its silence


def frame_dbfs(samples: np.ndarray) -> float:
    power = float(np.mean(samples.astype(np.float64) ** 2)) / 32768**2 if samples.size else 0.0
    return 10 * math.log10(power) if power > 0 else -120.0


@dataclass(frozen=True)
class EncodedScript:
    packets: list[bytes]  # 20 ms Opus packets
    levels: list[float]  # dBFS of each packet's audio
    silence: bytes  # one packet of silence, sent once the script is over


def encode_script(pcm: bytes) -> EncodedScript:
    """48 kHz mono PCM16 as 20 ms Opus packets, with each packet's level."""
    step = SAMPLES * 2
    frames = [np.frombuffer(pcm[at:at + step], np.int16) for at in range(0, len(pcm) - step + 1, step)]
    packets = opus_packets(pcm)
    count = min(len(packets), len(frames))  # the encoder gives one packet per frame
    return EncodedScript(packets[:count], [frame_dbfs(f) for f in frames[:count]], opus_packets(bytes(step * 3))[-1])


class ScriptTrack(MediaStreamTrack):
    """The script, one packet per 20 ms on the monotonic clock from the first request, then silence;
    `sent` keeps (time handed out, dBFS) of every script packet."""

    kind = "audio"

    def __init__(self, script: EncodedScript) -> None:
        super().__init__()
        self.script = script
        self.sent: list[tuple[float, float]] = []
        self.finished = asyncio.Event()
        self._index, self._pts, self._pacer = 0, 0, FramePacer(resync_s=None)

    async def recv(self) -> av.Packet:
        if self.readyState != "live":
            raise MediaStreamError
        await self._pacer.wait()
        if self._index < len(self.script.packets):
            data = self.script.packets[self._index]
            self.sent.append((time.monotonic(), self.script.levels[self._index]))
            self._index += 1
        else:
            data = self.script.silence
            self.finished.set()
        packet = av.Packet(data)
        packet.pts, packet.time_base = self._pts, fractions.Fraction(1, OPUS_RATE)
        self._pts += SAMPLES
        return packet


class TalkingCaller(Caller):
    """A bench/webrtc/sessions.py caller that speaks a script and keeps what it heard and was told."""

    def __init__(self, script: EncodedScript) -> None:
        self.track = ScriptTrack(script)
        super().__init__([], 0, track=self.track)
        self.heard: list[tuple[float, float]] = []  # (time decoded, dBFS) of every frame of the agent's audio
        self.transcript: list[list[str]] = []  # [role, text] finals, as the page shows them
        self.stages: dict[int, dict[str, float]] = {}
        self.events.on("message", self._on_event)

    async def _drain(self, track: Any) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            self.decoded += 1
            self.heard.append((time.monotonic(), frame_dbfs(frame.to_ndarray())))

    def _on_event(self, message: Any) -> None:
        try:
            event = json.loads(message)
        except (TypeError, ValueError):
            return
        if event.get("type") == "transcript" and event.get("final"):
            line = [str(event.get("role", "")), str(event.get("text", ""))]
            transcript_line(self.transcript, line, bool(event.get("replaces")))
        elif event.get("type") == "timing":
            turn = self.stages.setdefault(int(event.get("turn", 0)), {})
            turn.setdefault(str(event.get("stage", "")), float(event.get("ms", 0.0)))

    def lost(self) -> tuple[int, int]:
        """(lost, expected) RTP packets of the agent's stream, from sequence-number gaps."""
        _, received, lost = self.window(-math.inf, math.inf)
        return lost, received + lost


async def talk(http: httpx.AsyncClient, caller: TalkingCaller, delay_s: float, timeout_s: float) -> None:
    """Dial after `delay_s`, speak the whole script, hang up."""
    await asyncio.sleep(delay_s)
    await caller.dial(http)
    if not caller.failure:
        try:
            await asyncio.wait_for(caller.track.finished.wait(), timeout_s)
            await asyncio.sleep(HANG_UP_AFTER_S)
        except TimeoutError:
            caller.failure = "the script did not finish in time"
    failure = caller.failure  # closing the connection ourselves reads as "connection closed": not a failure
    with contextlib.suppress(Exception):  # a caller that breaks while hanging up has still been measured
        await caller.hang_up(http)
    caller.failure = failure


async def place_webrtc_calls(url: str, scripts: list[EncodedScript], stagger_s: float,
                             seconds: float) -> list[TalkingCaller]:
    from voicegate.internal.peer.ice import configure_ice_hosts

    configure_ice_hosts(["127.0.0.1"])  # aioice would otherwise offer only non-loopback hosts
    callers = [TalkingCaller(script) for script in scripts]
    limits = httpx.Limits(max_connections=max(64, 2 * len(scripts)))
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        await asyncio.gather(*(talk(http, caller, index * stagger_s / len(callers), seconds + 60)
                               for index, caller in enumerate(callers)))
    return callers
