"""bench/turns/voice_to_voice.py's WebRTC caller: the evals' aiortc phone (internal/evals/webrtc_phone.py), timed
on the wire, dialling voicegate over WHIP or Pipecat's bot over its SmallWebRTC offer/answer.

The wait is read as on SIP: from the caller's last speech frame sent (the moment aiortc's sender took it
from the track to encode and send) to the first frame of the reply louder than -45 dBFS received. A
received frame's time is when the RTP packet that carried it reached aiortc's receiver, before the
receiver's jitter buffer (it holds four packets before the first decode: 80 ms that no browser's
adaptive buffer would add to a clean loopback line) and before the decoder: the decoded frame is matched
to its packet by RTP timestamp (`WireClock`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from aiortc import RTCSessionDescription
from aiortc.mediastreams import MediaStreamTrack

from voicegate.internal.audio.resample import Resampler, resample
from voicegate.internal.evals.phone import CallSetupFailed
from voicegate.internal.evals.voice import Sound
from voicegate.internal.evals.webrtc_phone import (
    CONNECT_TIMEOUT_S,
    EAR_RATE,
    OPUS_RATE,
    WebRtcPhone,
    audio_frames,
    mono,
)
from voicegate.internal.evals.wire import Frame

LEAD_S = 1.0  # silence before the first turn: the media settles first


class WireClock:
    """RTP timestamp -> when the packet carrying it arrived. aiortc's receiver numbers the decoded frames
    from the first frame it decodes (its TimestampMapper: pts = RTP timestamp - origin), so the mapping it
    made is recorded too (`rebased`) and undone. A frame whose timestamp is still unknown takes the
    oldest arrival not yet used (on loopback packets arrive in order and none is lost)."""

    def __init__(self) -> None:
        self._arrivals: dict[int, float] = {}
        self._rebased: dict[int, int] = {}  # the receiver's pts -> RTP timestamp
        self.matched = 0  # frames timed by their own packet
        self.guessed = 0  # ... by the oldest arrival left, or by their decode time

    def packet(self, timestamp: int, at: float) -> None:
        self._arrivals.setdefault(timestamp, at)

    def rebased(self, pts: int, timestamp: int) -> None:
        self._rebased[pts] = timestamp

    def arrival(self, timestamp: int | None, fallback: float) -> float:
        if timestamp is not None:
            timestamp = self._rebased.pop(timestamp, timestamp)
        if timestamp is not None and timestamp in self._arrivals:
            self.matched += 1
            at = self._arrivals.pop(timestamp)
            for older in [t for t, seen in self._arrivals.items() if seen < at]:
                del self._arrivals[older]  # lost to the decoder (late, concealed): never asked for again
            return at
        self.guessed += 1
        if self._arrivals:
            oldest = min(self._arrivals, key=self._arrivals.__getitem__)
            return self._arrivals.pop(oldest)
        return fallback


def first_loud_after(frames: list[Frame], moment: float, before: float = float("inf")) -> Frame | None:
    """The first loud frame (by its wire time) after `moment` and before `before`."""
    return next((f for f in sorted(frames, key=lambda f: f.at) if moment < f.at < before and f.loud), None)


class BenchPhone(WebRtcPhone):
    """The evals' WebRTC phone with wire times on what it hears, and two ways to exchange the offer:
    `whip` (voicegate: POST /whip, SDP in and out) or `smallwebrtc` (Pipecat: POST /api/offer, JSON
    {sdp, type} in, {sdp, type, pc_id} out)."""

    def __init__(self, signalling: str = "whip") -> None:
        super().__init__(None)
        self.signalling = signalling
        self.clock = WireClock()

    async def dial(self, http: httpx.AsyncClient, token: str = "") -> None:
        if self.signalling == "whip":
            await super().dial(http, token)
            return
        await self.pc.setLocalDescription(await self.pc.createOffer())
        try:
            response = await http.post("/api/offer", json={"sdp": self.pc.localDescription.sdp, "type": "offer"})
        except httpx.HTTPError as exc:
            await self.pc.close()
            raise CallSetupFailed(f"POST /api/offer failed: {exc}") from None
        if response.status_code != 200:
            await self.pc.close()
            raise CallSetupFailed(f"POST /api/offer answered {response.status_code}: {response.text[:300]}")
        answer = response.json()
        self.session_id = str(answer.get("pc_id", ""))
        await self.pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], answer["type"]))
        try:
            await asyncio.wait_for(self._connected.wait(), CONNECT_TIMEOUT_S)
        except TimeoutError:
            await self.hang_up()
            raise CallSetupFailed(f"no media connection within {CONNECT_TIMEOUT_S:.0f} s") from None

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind != "audio":
            return
        receiver = next(t.receiver for t in self.pc.getTransceivers() if t.receiver.track is track)
        original = receiver._handle_rtp_packet
        clock = self.clock

        async def timed(packet: Any, arrival_time_ms: int) -> None:
            clock.packet(packet.timestamp, time.monotonic())
            await original(packet, arrival_time_ms=arrival_time_ms)

        receiver._handle_rtp_packet = timed  # type: ignore[method-assign]
        mapper = getattr(receiver, "_RTCRtpReceiver__timestamp_mapper", None)  # aiortc 1.16's, see WireClock
        if mapper is not None:
            rebase = mapper.map

            def mapped(timestamp: int) -> int:
                pts = int(rebase(timestamp))
                clock.rebased(pts, timestamp)
                return pts

            mapper.map = mapped
        self._tasks.append(asyncio.create_task(self._listen(track)))

    async def _listen(self, track: MediaStreamTrack) -> None:
        resampler: Resampler | None = None
        async for frame in audio_frames(track):
            if resampler is None:
                resampler = Resampler(frame.sample_rate, EAR_RATE)
            at = self.clock.arrival(frame.pts, time.monotonic())
            self.ear.heard.add(resampler.process(mono(frame)), at)


@dataclass
class WebRtcCall:
    session_id: str
    caller: list[tuple[float, float]]  # (sent at, dBFS) of every frame the caller sent
    reply: list[tuple[float, float]]  # (arrived at, dBFS) of every frame it heard
    problem: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)  # the server's DataChannel events (voicegate)
    frames_timed: tuple[int, int] = (0, 0)  # received frames timed by their own packet, and otherwise


async def place_webrtc_call(base_url: str, clips16k: list[bytes], gap_s: float, signalling: str = "whip",
                            on_turn: Callable[[int], None] = lambda _: None) -> WebRtcCall:
    """Dial, say each clip (16 kHz PCM16) followed by `gap_s` of silence, hang up; every frame both ways."""
    from voicegate.internal.evals.webrtc_phone import prepare_ice

    prepare_ice(base_url)
    phone = BenchPhone(signalling)
    problem = ""
    async with httpx.AsyncClient(base_url=base_url, timeout=30.0) as http:
        try:
            await phone.dial(http, "")
        except CallSetupFailed as exc:
            return WebRtcCall("", [], [], str(exc))
        try:
            await asyncio.sleep(LEAD_S)
            for index, clip in enumerate(clips16k):
                utterance = phone.mouth.say([Sound(resample(clip, 16000, OPUS_RATE))])
                await utterance.done.wait()
                if phone.ended.is_set():
                    problem = f"the call ended after turn {index + 1}: {phone.end_reason}"
                    break
                on_turn(index)
                await asyncio.sleep(gap_s)
        finally:
            await phone.hang_up()
    return WebRtcCall(phone.session_id, [(f.at, f.level) for f in phone.mouth.sent.frames],
                      [(f.at, f.level) for f in phone.ear.heard.frames], problem,
                      [seen.event for seen in phone.channel_events], (phone.clock.matched, phone.clock.guessed))
