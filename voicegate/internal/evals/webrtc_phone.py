"""A simulated browser caller over WHIP (aiortc): Opus both ways, the `events` DataChannel, DELETE to hang up.

It speaks what the mouth hands it every 20 ms at 48 kHz (Opus' rate; the voice itself is rendered at
16 kHz, a microphone's speech band), over a -60 dBFS room noise as a real microphone would: exact digital
silence around words is something no browser sends. What it hears is decoded, mixed to mono and kept
at 16 kHz. The DataChannel carries the server's account of the call (what it heard, what the agent said,
how the call ended); the tools the agent called come from the server's call events, like a SIP call's.
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import ipaddress
import json
import socket
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import av
import httpx
import numpy as np
from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from voicegate.internal.audio.resample import Resampler
from voicegate.internal.evals.phone import CallSetupFailed, Phone
from voicegate.internal.evals.server_api import CallEvents, Observed
from voicegate.internal.evals.wire import FRAME_S, Ear, Mouth
from voicegate.internal.peer.ice import configure_ice_hosts

OPUS_RATE = 48000
EAR_RATE = 16000
CONNECT_TIMEOUT_S = 30.0
ROOM_NOISE = 30.0  # standard deviation in PCM16 units: about -60 dBFS
# Events that only the server's call events carry; the rest come on the DataChannel itself.
FEED_ONLY = ("tool", "call.started", "call.ended")


def prepare_ice(base_url: str) -> None:
    """Offer the address this machine reaches the server from as our ICE host candidate (process-wide:
    aioice leaves loopback out by default, and a server on this machine is reached over loopback)."""
    host = urlsplit(base_url).hostname or "127.0.0.1"
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback:
        configure_ice_hosts(["127.0.0.1"])
        return
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))  # sends nothing: only picks the interface toward the server
        configure_ice_hosts([str(probe.getsockname()[0])])


class TokenRequired(CallSetupFailed):
    """The server takes no call without a token (server.jwt_secret): an anonymous caller cannot phone it."""


class FramePacer:
    """One frame every 20 ms on the monotonic clock, for an aiortc track's `recv`. After a stall longer
    than `resync_s` it starts again from now rather than sending the missed frames in a burst (None:
    never: a script's timing is kept, late frames go out at once)."""

    def __init__(self, resync_s: float | None = 0.2) -> None:
        self._next_at = 0.0
        self._resync_s = resync_s

    async def wait(self) -> None:
        now = time.monotonic()
        stalled = self._resync_s is not None and now - self._next_at > self._resync_s
        self._next_at = now if not self._next_at or stalled else self._next_at + FRAME_S
        if self._next_at > now:
            await asyncio.sleep(self._next_at - now)


async def audio_frames(track: MediaStreamTrack) -> AsyncIterator[av.AudioFrame]:
    """The decoded frames of a received audio track, until it ends."""
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        assert isinstance(frame, av.AudioFrame)
        yield frame


def mono(frame: av.AudioFrame) -> bytes:
    """A decoded frame's samples mixed down to one channel (PCM16)."""
    return bytes(frame.to_ndarray().reshape(-1, len(frame.layout.channels)).mean(axis=1).astype(np.int16).tobytes())


class MouthTrack(MediaStreamTrack):
    """The mouth's frames as an audio track, one every 20 ms on the monotonic clock."""

    kind = "audio"

    def __init__(self, mouth: Mouth) -> None:
        super().__init__()
        self._mouth = mouth
        self._pts = 0
        self._pacer = FramePacer()
        self._noise = np.random.default_rng(7)

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        await self._pacer.wait()
        pcm = self._mouth.frame()
        samples = np.frombuffer(pcm, np.int16).astype(np.float64) if pcm is not None else np.zeros(960)
        samples = np.clip(samples + self._noise.standard_normal(samples.size) * ROOM_NOISE, -32768, 32767)
        frame = av.AudioFrame.from_ndarray(samples.astype(np.int16).reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate, frame.pts, frame.time_base = OPUS_RATE, self._pts, fractions.Fraction(1, OPUS_RATE)
        self._pts += samples.size
        return frame


class WebRtcPhone(Phone):
    transport = "webrtc"

    def __init__(self, events: CallEvents | None) -> None:
        super().__init__(Mouth(OPUS_RATE), Ear(EAR_RATE))
        self._events = events
        self.channel_events: list[Observed] = []
        self.pc = RTCPeerConnection()
        self.pc.addTrack(MouthTrack(self.mouth))
        self.channel = self.pc.createDataChannel("events")
        self.channel.on("message", self._on_message)
        self.pc.on("track", self._on_track)
        self.pc.on("connectionstatechange", self._on_state)
        self._tasks: list[asyncio.Task[None]] = []
        self._connected = asyncio.Event()
        self._location = ""
        self._headers: dict[str, str] = {}
        self._http: httpx.AsyncClient | None = None

    def server_events(self) -> list[Observed]:
        extra = [seen for seen in (self._events.of_session(self.session_id) if self._events else [])
                 if seen.event.get("type") in FEED_ONLY]
        return sorted([*self.channel_events, *extra], key=lambda seen: seen.at)

    @property
    def server_events_problem(self) -> str:
        # The DataChannel always carries the call's own events; only the tool calls need the call events.
        return ""

    @property
    def tool_events_problem(self) -> str:
        if self._events is None:
            return "no HTTP API key to read the server's call events with"
        return self._events.problem

    async def dial(self, http: httpx.AsyncClient, token: str) -> None:
        """POST /whip, set up the connection, and return once media flows."""
        self._http = http
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        await self.pc.setLocalDescription(await self.pc.createOffer())
        try:
            response = await http.post("/whip", content=self.pc.localDescription.sdp,
                                       headers={"Content-Type": "application/sdp", **self._headers})
        except httpx.HTTPError as exc:
            await self.pc.close()
            raise CallSetupFailed(f"POST /whip failed: {exc}") from None
        if response.status_code != 201:
            await self.pc.close()
            failure = TokenRequired if response.status_code == 401 and not token else CallSetupFailed
            raise failure(f"POST /whip answered {response.status_code}: {response.text[:300]}")
        self._location = response.headers["location"]
        self._headers["X-Resume-Token"] = response.headers.get("x-resume-token", "")
        self.session_id = self._location.rstrip("/").rsplit("/", 1)[-1]
        await self.pc.setRemoteDescription(RTCSessionDescription(response.text, "answer"))
        try:
            await asyncio.wait_for(self._connected.wait(), CONNECT_TIMEOUT_S)
        except TimeoutError:
            await self.hang_up()
            raise CallSetupFailed(f"no media connection within {CONNECT_TIMEOUT_S:.0f} s") from None

    async def hang_up(self) -> None:
        if not self.ended.is_set():
            self.end("caller", "client hung up")
            if self._http is not None and self._location:
                with contextlib.suppress(httpx.HTTPError):
                    await self._http.delete(self._location, headers=self._headers)
        await self.pc.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _on_state(self) -> None:
        state = self.pc.connectionState
        if state == "connected":
            self._connected.set()
        elif state in ("failed", "closed") and self._connected.is_set():
            self.end("agent", f"connection {state}")

    def _on_message(self, message: Any) -> None:
        try:
            event = json.loads(message)
        except (TypeError, ValueError):
            return
        if not isinstance(event, dict):
            return
        self.channel_events.append(Observed(time.monotonic(), event))
        if event.get("type") == "connection" and event.get("state") == "ended":
            reason = str(event.get("reason", ""))
            self.end("caller" if reason == "client hung up" else "agent", reason)

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio":
            self._tasks.append(asyncio.create_task(self._listen(track)))

    async def _listen(self, track: MediaStreamTrack) -> None:
        resampler: Resampler | None = None
        async for frame in audio_frames(track):
            if resampler is None:
                resampler = Resampler(frame.sample_rate, EAR_RATE)
            self.ear.hear(resampler.process(mono(frame)))
