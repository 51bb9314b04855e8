"""One aiortc RTCPeerConnection per WHIP POST: offer in, answer out, audio and events either way.

`PeerConnection` knows WebRTC and nothing of sessions: it negotiates one sendrecv audio track (Opus
preferred; aiortc takes whatever of Opus/PCMU/PCMA the offer has) plus the client's DataChannel
`events`, turns inbound audio into 20 ms frames for `on_audio`, asks `outbound.source` for the
agent's audio, and reports connection states. `WebRtcCall` (call.py) ties it to a Session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from aiortc import RTCConfiguration, RTCDataChannel, RTCPeerConnection, RTCRtpReceiver, RTCSessionDescription
from aiortc.jitterbuffer import JitterBuffer
from aiortc.mediastreams import MediaStreamTrack
from aiortc.sdp import SessionDescription

from voicegate.internal.peer.channel import EVENT_CHANNEL_LABEL, ChannelEventSink, ClientMessage, parse_client_message
from voicegate.internal.peer.tracks import AgentAudioTrack, InboundAudio, consume_track

log = logging.getLogger(__name__)

# aiortc's audio receiver releases a packet to the decoder only once four later ones have arrived (80 ms). A
# player needs that cushion; we do not: frames go to the VAD, the recogniser or a Realtime model as they
# arrive, never to a clock, and a lost packet stalls that buffer whatever its depth. One packet of lookahead
# (the least it can do: it knows a frame is whole when the next one starts) saves 60 ms on every caller turn.
AUDIO_PREFETCH = 1
AUDIO_JITTER_CAPACITY = 16  # aiortc's own


class OfferError(Exception):
    """The SDP offer cannot be answered; the message says why (safe to show the client)."""


StateHandler = Callable[[str], Awaitable[None]]


class PeerConnection:
    def __init__(self, configuration: RTCConfiguration, sample_rate: int) -> None:
        self.pc = RTCPeerConnection(configuration)
        self.sample_rate = sample_rate
        # Identifies this ICE session (RFC 9725 asks for a strong entity-tag); a resume gets a new one.
        self.etag = f'"{secrets.token_hex(12)}"'
        self.events = ChannelEventSink()
        self.outbound = AgentAudioTrack(sample_rate)
        self.inbound = InboundAudio(sample_rate, self._on_frame)
        self.on_audio: Callable[[bytes], None] | None = None
        self.on_message: Callable[[ClientMessage], None] | None = None
        self.on_state: StateHandler | None = None
        self.on_error: Callable[[BaseException], None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self.pc.on("track", self._on_track)
        self.pc.on("datachannel", self._on_datachannel)
        self.pc.on("connectionstatechange", self._on_connection_state)

    @property
    def state(self) -> str:
        return str(self.pc.connectionState)

    @property
    def closed(self) -> bool:
        return self._closed

    async def accept_offer(self, sdp: str) -> None:
        """Apply the client's offer; OfferError when it is not a usable audio offer."""
        if "m=audio" not in sdp:
            raise OfferError("the offer has no audio section (m=audio)")
        try:
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
        except Exception as exc:  # aiortc raises many kinds (ValueError, IndexError, ...) for bad SDP
            detail = str(exc) or f"malformed SDP ({type(exc).__name__})"
            raise OfferError(f"cannot use the SDP offer: {detail}") from exc
        audio = [t for t in self.pc.getTransceivers() if t.kind == "audio"]
        if not audio:
            raise OfferError("the offer has no audio section (m=audio)")
        for transceiver in audio:
            shallow_jitter_buffer(transceiver.receiver)
        self.pc.addTrack(self.outbound)

    async def answer(self) -> str:
        """Our SDP answer, with every local candidate gathered (WHIP has no server-side trickle)."""
        answer = await self.pc.createAnswer()
        if sends_opus(answer.sdp):
            self.outbound.use_opus()  # before setLocalDescription starts the sender
        await self.pc.setLocalDescription(answer)
        return str(self.pc.localDescription.sdp)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.events.close()
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await self.pc.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # ---- aiortc callbacks --------------------------------------------------------------------------

    def _on_frame(self, pcm: bytes) -> None:
        handler = self.on_audio
        if handler is not None:
            handler(pcm)

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind != "audio":
            return
        self._spawn(consume_track(track, self.inbound), "webrtc-inbound-audio")

    def _on_datachannel(self, channel: RTCDataChannel) -> None:
        if channel.label != EVENT_CHANNEL_LABEL:
            log.debug("DataChannel %r ignored (only %r is used)", channel.label, EVENT_CHANNEL_LABEL)
            return
        self.events.use(channel)
        channel.on("message", self._on_channel_message)

    def _on_channel_message(self, message: str | bytes) -> None:
        parsed = parse_client_message(message)
        if parsed is None:
            return
        handler = self.on_message
        if handler is None:
            return
        try:
            handler(parsed)
        except Exception as exc:
            self._report(exc)

    async def _on_connection_state(self) -> None:
        handler = self.on_state
        if handler is None:
            return
        try:
            await handler(self.state)
        except Exception as exc:
            self._report(exc)

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._report(task.exception())  # type: ignore[arg-type]

    def _report(self, exc: BaseException) -> None:
        if self.on_error is not None:
            self.on_error(exc)
        else:
            log.error("peer connection handler failed", exc_info=exc)


def audio_jitter_buffer() -> JitterBuffer:
    return JitterBuffer(capacity=AUDIO_JITTER_CAPACITY, prefetch=AUDIO_PREFETCH)


def shallow_jitter_buffer(receiver: RTCRtpReceiver) -> None:
    """Give an audio receiver our one-packet buffer, before any RTP arrives (aiortc has no option for it:
    the attribute is its private one; another aiortc version without it keeps its own buffer, logged)."""
    name = "_RTCRtpReceiver__jitter_buffer"
    if isinstance(getattr(receiver, name, None), JitterBuffer):
        setattr(receiver, name, audio_jitter_buffer())
    else:
        log.warning("aiortc's receiver has no jitter buffer to replace: inbound audio keeps its own delay")


def sends_opus(sdp: str) -> bool:
    """Whether our answer sends audio as Opus: aiortc's sender encodes with the first codec the audio
    section lists (PCMU or PCMA when the offer had no Opus)."""
    audio = [m for m in SessionDescription.parse(sdp).media if m.kind == "audio"]
    return bool(audio and audio[0].rtp.codecs) and audio[0].rtp.codecs[0].mimeType.lower() == "audio/opus"


class PeerRegistry:
    """Every PeerConnection of this process, so a shutdown can close the ones no session owns yet."""

    def __init__(self) -> None:
        self._peers: set[PeerConnection] = set()

    def __len__(self) -> int:
        return sum(1 for peer in self._peers if not peer.closed)

    def add(self, peer: PeerConnection) -> None:
        self._peers = {p for p in self._peers if not p.closed}
        self._peers.add(peer)

    def live(self) -> list[PeerConnection]:
        return [peer for peer in self._peers if not peer.closed]

    async def close_all(self) -> None:
        peers, self._peers = list(self._peers), set()
        await asyncio.gather(*(peer.close() for peer in peers), return_exceptions=True)
