"""What a browser caller's audio waits for before the pipeline gets it: one packet of lookahead, not five.

Frames go to the VAD, the recogniser or a Realtime model as they arrive (no player, no clock), so neither
aiortc's four-packet prefetch nor the resampler's held-back filter delay buys anything: each cost a caller
turn (and a Realtime model's hearing) 80 and 20 ms. docs/realtime.md's added-latency figures measure it.
"""

from __future__ import annotations

import av
import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection
from aiortc.jitterbuffer import JitterBuffer
from aiortc.rtp import RtpPacket

from voicegate.internal.peer.connection import PeerConnection, audio_jitter_buffer
from voicegate.internal.peer.tracks import InboundAudio


def packet(sequence: int) -> RtpPacket:
    rtp = RtpPacket(payload_type=111, sequence_number=sequence, timestamp=sequence * 960, payload=b"\xf8\xff\xfe")
    rtp._data = rtp.payload  # type: ignore[attr-defined]  # as aiortc's receiver sets it (the depayloaded frame)
    return rtp


def opus_like_frame(rate: int = 48000) -> av.AudioFrame:
    samples = np.repeat(np.full(rate // 50, 1000, np.int16), 2).reshape(1, -1)
    frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="stereo")
    frame.sample_rate = rate
    return frame


def test_each_20ms_packet_completes_its_own_frame_at_once() -> None:
    for rate in (8000, 16000, 48000):
        frames: list[bytes] = []
        inbound = InboundAudio(rate, frames.append)
        for sent in range(1, 6):
            inbound.feed(opus_like_frame())
            assert len(frames) == sent, (rate, sent)  # not one behind, waiting for the next packet
        assert all(len(frame) == rate // 50 * 2 for frame in frames)


def test_the_audio_buffer_releases_a_packet_as_soon_as_the_next_one_arrives() -> None:
    ours = audio_jitter_buffer()
    assert ours.add(packet(0))[1] is None  # a frame is known whole only when the next one starts
    released = ours.add(packet(1))[1]
    assert released is not None and released.timestamp == 0
    aiortcs = JitterBuffer(capacity=16, prefetch=4)  # what aiortc gives an audio receiver
    assert all(aiortcs.add(packet(sequence))[1] is None for sequence in range(4))


async def test_an_answered_offer_gets_the_one_packet_buffer() -> None:
    caller = RTCPeerConnection()
    caller.addTransceiver("audio", direction="sendrecv")
    await caller.setLocalDescription(await caller.createOffer())
    peer = PeerConnection(RTCConfiguration(), 16000)
    try:
        await peer.accept_offer(caller.localDescription.sdp)
        receivers = [t.receiver for t in peer.pc.getTransceivers() if t.kind == "audio"]
        assert receivers
        for receiver in receivers:
            buffer = receiver._RTCRtpReceiver__jitter_buffer  # type: ignore[attr-defined]
            assert buffer.add(packet(0))[1] is None and buffer.add(packet(1))[1] is not None
    finally:
        await peer.close()
        await caller.close()
