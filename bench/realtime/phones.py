"""bench/realtime/latency.py's two callers, each timing its audio on the wire.

- `SipRtpPhone`: the product's SIP user agent for the signalling (internal/evals/sip_phone.py's `SipLine`),
  and a bare UDP socket for the media: one PCMU packet every 20 ms on an absolute schedule, the time of each
  `sendto` noted, each packet received noted when read (no jitter buffer on this side to wait in).
- `WebRtcTonePhone`: the voice-to-voice bench's aiortc caller (bench/turns/voice_to_voice_webrtc.py), whose
  sent frames carry the time aiortc took them and whose heard frames carry their packet's arrival.
"""

from __future__ import annotations

import asyncio
import random
import struct
import time
from collections import deque

import httpx
import numpy as np

from bench.turns.voice_to_voice_webrtc import BenchPhone
from voicegate.internal.audio.g711 import ulaw_decode, ulaw_encode
from voicegate.internal.evals.sip_phone import SipLine
from voicegate.internal.evals.voice import Sound
from voicegate.internal.evals.webrtc_phone import OPUS_RATE, prepare_ice
from voicegate.internal.evals.wire import dbfs
from voicegate.internal.sip.dialog import Dialog
from voicegate.internal.sip.sdp import build_offer, negotiate

__all__ = ["QUIET_DBFS", "SipRtpPhone", "WebRtcTonePhone", "dbfs", "tone"]

QUIET_DBFS = -45.0  # louder is sound (the agent's idle frames are digital silence)
PCMU = 0
FRAME_S = 0.020
TONE_HZ = 440.0
TONE_LEVEL = 0.3  # about -13 dBFS


def tone(seconds: float, rate: int) -> bytes:
    """The caller's mark: a sine from its first sample, so the first packet that carries it is loud."""
    t = np.arange(int(seconds * rate)) / rate
    return (np.sin(2 * np.pi * TONE_HZ * t) * TONE_LEVEL * 32767).astype("<i2").tobytes()


class SipRtpPhone(asyncio.DatagramProtocol):
    rate = 8000

    def __init__(self, host: str) -> None:
        self.host = host
        self.heard: list[tuple[float, float]] = []  # (read at, dBFS) of every packet received
        self.line = SipLine(host, None)
        self.dialog: Dialog | None = None
        self._transport: asyncio.DatagramTransport | None = None
        self._remote: tuple[str, int] | None = None
        self._pending: deque[bytes] = deque()
        self._onset: asyncio.Future[float] | None = None
        self._sender: asyncio.Task[None] | None = None

    async def dial(self, target: str) -> None:
        await self.line.start()
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: self, local_addr=(self.host, 0))
        self._transport = transport
        port = transport.get_extra_info("sockname")[1]
        call = await self.line.ua.call(target, build_offer(self.host, port, ("PCMU",)), timeout_s=30.0,
                                       from_user="+15550100123")
        self.dialog = call.dialog
        media = negotiate(call.answer) if call.answer is not None else None
        if media is None:
            raise RuntimeError("the server's answer carried no usable SDP")
        self._remote = (media.remote_host, media.remote_port)
        self._sender = asyncio.create_task(self._send())

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        at = time.monotonic()
        if len(data) > 12 and data[1] & 0x7F == PCMU:
            self.heard.append((at, dbfs(ulaw_decode(data[12:]))))

    async def _send(self) -> None:
        assert self._transport is not None and self._remote is not None
        seq, stamp, ssrc = random.randrange(1 << 16), random.randrange(1 << 32), random.randrange(1 << 32)
        silence = ulaw_encode(bytes(2 * self.rate // 50))
        start = time.monotonic()
        sent = 0
        while True:
            pcm = self._pending.popleft() if self._pending else None
            header = struct.pack("!BBHII", 0x80, PCMU, seq & 0xFFFF, stamp & 0xFFFFFFFF, ssrc)
            at = time.monotonic()
            self._transport.sendto(header + (ulaw_encode(pcm) if pcm is not None else silence), self._remote)
            if pcm is not None and self._onset is not None and not self._onset.done():
                self._onset.set_result(at)
            seq, stamp, sent = seq + 1, stamp + self.rate // 50, sent + 1
            await asyncio.sleep(max(0.0, start + sent * FRAME_S - time.monotonic()))

    async def say(self, pcm: bytes) -> float:
        """Send `pcm` (8 kHz PCM16) from the next packet on; the time its first packet was sent."""
        size = 2 * self.rate // 50
        frames = [pcm[i:i + size].ljust(size, b"\x00") for i in range(0, len(pcm), size)]
        self._onset = asyncio.get_running_loop().create_future()
        self._pending.extend(frames)
        onset = await self._onset
        await asyncio.sleep(len(frames) * FRAME_S)
        return onset

    async def hang_up(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
        if self.dialog is not None:
            try:
                await self.line.ua.hangup(self.dialog)
            except Exception:  # the bench's figures are taken; a BYE that fails changes nothing
                pass
        if self._transport is not None:
            self._transport.close()
        await self.line.stop()


class WebRtcTonePhone:
    rate = OPUS_RATE

    def __init__(self) -> None:
        self.phone = BenchPhone("whip")
        self.http: httpx.AsyncClient | None = None

    @property
    def heard(self) -> list[tuple[float, float]]:
        return [(frame.at, frame.level) for frame in self.phone.ear.heard.frames]

    async def dial(self, base_url: str) -> None:
        prepare_ice(base_url)
        self.http = httpx.AsyncClient(base_url=base_url, timeout=30.0)
        await self.phone.dial(self.http, "")

    async def say(self, pcm: bytes) -> float:
        utterance = self.phone.mouth.say([Sound(pcm)])
        await utterance.done.wait()
        assert utterance.started_at is not None
        return utterance.started_at

    async def hang_up(self) -> None:
        await self.phone.hang_up()
        if self.http is not None:
            await self.http.aclose()
