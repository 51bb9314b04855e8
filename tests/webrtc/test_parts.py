"""The transport's parts without sockets: buckets, resume tokens, frame re-cutting, pacing, messages."""

from __future__ import annotations

import asyncio
import itertools
import json

import aioice.ice
import av
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voicegate.internal.config.sections import IceServer
from voicegate.internal.conversation.rolling_summary import RollingSummary
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.peer.channel import ChannelEventSink, Ping, TypedTurn, parse_client_message
from voicegate.internal.peer.ice import configure_ice_hosts, parse_ice_hosts, rtc_configuration
from voicegate.internal.peer.opus import SETTLE_FRAMES, OpusVoice, silence_packet
from voicegate.internal.peer.tracks import AgentAudioTrack, InboundAudio
from voicegate.internal.pipeline.events import StateEvent
from voicegate.internal.session import Conversation, Session
from voicegate.internal.token_bucket import TokenBucketLimiter
from voicegate.internal.webrtc.resume import ResumeTokens


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ---- rate limits ----------------------------------------------------------------------------------

def test_a_bucket_allows_a_minutes_burst_then_refills_continuously() -> None:
    clock = FakeClock()
    limiter = TokenBucketLimiter(30, clock=clock)
    assert all(limiter.take("198.51.100.1").allowed for _ in range(30))
    refused = limiter.take("198.51.100.1")
    assert not refused.allowed and refused.retry_after_s == 2  # one token every 2 s
    assert limiter.take("198.51.100.2").allowed  # another address has its own bucket
    clock.now += 2.0
    assert limiter.take("198.51.100.1").allowed
    assert not limiter.take("198.51.100.1").allowed


def test_zero_per_minute_disables_the_limit() -> None:
    limiter = TokenBucketLimiter(0)
    assert all(limiter.take("x").allowed for _ in range(1000))


def test_idle_buckets_are_forgotten_so_a_scan_cannot_grow_the_table() -> None:
    clock = FakeClock()
    limiter = TokenBucketLimiter(60, clock=clock, max_clients=100)
    for n in range(1000):
        limiter.take(f"10.0.{n // 256}.{n % 256}")
        clock.now += 0.001
    assert len(limiter._buckets) <= 101


# ---- resume tokens --------------------------------------------------------------------------------

def new_session(identity: CallerIdentity | None = None) -> Session:
    return Session(identity or CallerIdentity.anonymous(), "webrtc", Conversation(RollingSummary(None, 1.0)))


def test_resume_tokens_are_single_use_random_and_not_the_session_id() -> None:
    live: dict[str, Session] = {}
    tokens = ResumeTokens(live.get)
    session = new_session()
    live[session.id] = session
    first = tokens.issue(session)
    assert len(first) >= 43 and session.id not in first
    assert tokens.redeem(None, session.identity).status == "new"
    assert tokens.redeem("made-up", session.identity).status == "expired"
    outcome = tokens.redeem(first, session.identity)
    assert outcome.status == "resumed" and outcome.session is session
    assert tokens.redeem(first, session.identity).status == "expired"  # spent
    second = tokens.issue(session)
    third = tokens.issue(session)  # each answer retires the previous token
    assert tokens.redeem(second, session.identity).status == "expired"
    assert tokens.redeem(third, session.identity).status == "resumed"


def test_a_token_of_an_ended_session_is_expired_and_forgotten() -> None:
    live: dict[str, Session] = {}
    tokens = ResumeTokens(live.get)
    session = new_session()
    live[session.id] = session
    token = tokens.issue(session)
    session.ended = True
    assert tokens.redeem(token, session.identity).status == "expired"
    assert len(tokens) == 0


def test_another_callers_token_resumes_nothing_and_stays_valid_for_its_owner() -> None:
    live: dict[str, Session] = {}
    tokens = ResumeTokens(live.get)
    alice = new_session(CallerIdentity("jwt", "alice", "HS256 token"))
    live[alice.id] = alice
    token = tokens.issue(alice)
    assert tokens.redeem(token, CallerIdentity("jwt", "mallory")).status == "expired"
    assert tokens.redeem(token, CallerIdentity.anonymous()).status == "expired"
    assert tokens.redeem(token, CallerIdentity("jwt", "alice", "a different reason")).status == "resumed"


# ---- audio ----------------------------------------------------------------------------------------

def stereo_frame(samples: np.ndarray, rate: int = 48000) -> av.AudioFrame:
    interleaved = np.repeat(samples.astype(np.int16), 2).reshape(1, -1)
    frame = av.AudioFrame.from_ndarray(interleaved, format="s16", layout="stereo")
    frame.sample_rate = rate
    return frame


def test_inbound_audio_downmixes_packed_and_planar_frames_of_any_format() -> None:
    def settled(frames: list[bytes]) -> np.ndarray:
        return np.frombuffer(b"".join(frames), np.int16)[800:]  # past the resampler's filter delay

    packed_frames: list[bytes] = []
    packed = InboundAudio(16000, packed_frames.append)
    for _ in range(25):
        left_right = np.tile(np.array([1000, 3000], dtype=np.int16), 960).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(left_right, format="s16", layout="stereo")
        frame.sample_rate = 48000
        packed.feed(frame)
    assert np.allclose(settled(packed_frames), 2000, atol=30)

    planar_frames: list[bytes] = []
    planar = InboundAudio(16000, planar_frames.append)
    for _ in range(25):
        channels = np.stack([np.full(960, 0.5, np.float32), np.full(960, 0.25, np.float32)])
        frame = av.AudioFrame.from_ndarray(channels, format="fltp", layout="stereo")
        frame.sample_rate = 48000
        planar.feed(frame)
    assert np.allclose(settled(planar_frames), 0.375 * 32767, atol=60)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=2880), min_size=1, max_size=40))
def test_inbound_audio_is_recut_into_exact_20ms_frames_whatever_the_packet_sizes(sizes: list[int]) -> None:
    frames: list[bytes] = []
    inbound = InboundAudio(16000, frames.append)
    for size in sizes:
        inbound.feed(stereo_frame(np.full(size, 1000)))
    assert all(len(f) == 640 for f in frames)
    total_in = sum(sizes) / 3  # samples at 16 kHz
    assert len(frames) * 320 <= total_in + 64
    assert len(frames) * 320 >= total_in - 320 - 64  # only a remainder (and filter delay) is held back


def test_inbound_speech_survives_downmix_and_resampling() -> None:
    t = np.arange(48000) / 48000
    tone = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    frames: list[bytes] = []
    inbound = InboundAudio(16000, frames.append)
    for start in range(0, 48000, 960):
        inbound.feed(stereo_frame(tone[start:start + 960]))
    out = np.frombuffer(b"".join(frames), np.int16)
    spectrum = np.abs(np.fft.rfft(out[1600:]))
    peak_hz = np.argmax(spectrum) * 16000 / (len(out) - 1600)
    assert abs(peak_hz - 440) < 5
    assert 4000 < np.abs(out[1600:]).max() < 9000


async def audio_frame(track: AgentAudioTrack) -> av.AudioFrame:
    """The track's next frame, which a call that does not send Opus gets (aiortc encodes it)."""
    frame = await track.recv()
    assert isinstance(frame, av.AudioFrame)
    return frame


async def test_outbound_track_paces_frames_and_counts_pts_in_samples() -> None:
    pulled = iter([b"\x01\x00" * 320, None, b"\x02\x00" * 10])
    track = AgentAudioTrack(16000, source=lambda: next(pulled, None))
    loop = asyncio.get_running_loop()
    started = loop.time()
    frames = [await audio_frame(track) for _ in range(6)]
    elapsed = loop.time() - started
    assert [f.pts for f in frames] == [0, 320, 640, 960, 1280, 1600]
    assert all(f.samples == 320 and f.sample_rate == 16000 and f.layout.name == "mono" for f in frames)
    assert frames[0].to_ndarray()[0, 0] == 1 and not frames[1].to_ndarray().any()
    assert frames[2].to_ndarray()[0, 0] == 2 and not frames[2].to_ndarray()[0, 10:].any()  # padded
    assert elapsed >= 0.09  # five intervals of 20 ms: paced, not as fast as the sender asks
    track.stop()


async def test_outbound_track_restarts_its_clock_after_a_stall_instead_of_bursting() -> None:
    clock = FakeClock()
    track = AgentAudioTrack(16000, clock=clock)
    await track.recv()
    clock.now += 5.0  # the loop was blocked for five seconds
    await track.recv()
    assert track._next_at == clock.now
    track.stop()


def decode_opus(packets: list[bytes]) -> np.ndarray:
    """What a receiver hears: aiortc's own Opus decoder (48 kHz stereo), left channel."""
    from aiortc.codecs.opus import OpusDecoder
    from aiortc.jitterbuffer import JitterFrame

    decoder = OpusDecoder()
    frames = [frame for i, packet in enumerate(packets)
              for frame in decoder.decode(JitterFrame(data=packet, timestamp=i * 960))]
    return np.concatenate([frame.to_ndarray().reshape(-1)[::2] for frame in frames
                           if isinstance(frame, av.AudioFrame)])


@pytest.mark.parametrize("rate", [8000, 16000])
def test_opus_voice_sends_cached_silence_while_quiet_and_a_reply_after_five_seconds_arrives_whole(rate: int) -> None:
    voice = OpusVoice(rate)
    samples = rate // 50
    t = np.arange(rate // 2) / rate  # the reply: half a second of a 440 Hz tone at -12 dBFS
    reply = (0.25 * 32767 * np.sin(2 * np.pi * 440 * t)).astype(np.int16).tobytes()
    frames: list[bytes | None] = [reply[i:i + samples * 2] for i in range(0, len(reply), samples * 2)]
    stream = frames + [None] * 250 + frames + [None] * 50  # a reply, five seconds of quiet, the next reply
    packets = [voice.packet(pcm, i * samples) for i, pcm in enumerate(stream)]

    pts = [p.pts for p in packets]
    assert pts[:3] == [0, 960, 1920]  # the 48 kHz RTP clock, continuous throughout
    assert all(a is not None and b is not None and b - a == 960 for a, b in itertools.pairwise(pts))
    payloads = [bytes(p) for p in packets]
    quiet = payloads[25 + SETTLE_FRAMES:275]
    assert set(quiet) == {silence_packet(rate)} and len(quiet[0]) < 16  # the encoder rested, a few bytes each
    assert voice.encoded == 2 * (25 + SETTLE_FRAMES)

    heard = decode_opus(payloads).astype(np.float64)
    per_frame = 960
    energy = [np.sqrt(np.mean(heard[i:i + per_frame] ** 2)) for i in range(0, len(heard), per_frame)]
    assert max(energy[40:270]) < 30  # the quiet decodes to silence, no hiss or click
    sent_rms = 0.25 * 32767 / np.sqrt(2)
    second = heard[275 * per_frame:305 * per_frame]  # the reply after the quiet, with the codec's delay
    loud = [e for e in energy[275:305] if e > sent_rms / 4]
    assert len(loud) >= 24, "the reply after five seconds of quiet arrives whole, from its first frame"
    assert abs(20 * np.log10(np.sqrt(np.mean(second ** 2)) * np.sqrt(30 / 25) / sent_rms)) < 2
    spectrum = np.abs(np.fft.rfft(second))
    assert abs(np.argmax(spectrum) * 48000 / len(second) - 440) < 5


async def test_outbound_track_hands_aiortc_opus_packets_once_the_call_sends_opus() -> None:
    pulled = iter([b"\x01\x10" * 320, None])
    track = AgentAudioTrack(16000, source=lambda: next(pulled, None))
    assert track.use_opus()
    sent = [await track.recv() for _ in range(3)]
    assert all(isinstance(p, av.Packet) for p in sent)
    assert [p.pts for p in sent] == [0, 960, 1920] and track.frames_sent == 3
    track.stop()
    assert not AgentAudioTrack(11025).use_opus()  # not an Opus input rate: aiortc encodes frames


# ---- the DataChannel ------------------------------------------------------------------------------

def test_client_messages_are_parsed_strictly() -> None:
    assert parse_client_message('{"type": "ping"}') == Ping()
    assert parse_client_message('{"type": "text", "text": "  hi  "}') == TypedTurn("hi")
    assert parse_client_message(json.dumps({"type": "text", "text": "x" * 5000})) == TypedTurn("x" * 2000)
    for junk in ("", "{", "[]", "null", '{"type": "text"}', '{"type": "text", "text": ["a"]}',
                 '{"type": "identify", "resource_id": "alice"}', b'{"type": "ping"}', "y" * 9000):
        assert parse_client_message(junk) is None


class FakeChannel:
    def __init__(self, state: str = "connecting") -> None:
        self.readyState = state
        self.bufferedAmount = 0
        self.sent: list[str] = []
        self.handlers: dict[str, object] = {}

    def on(self, name: str, handler: object) -> None:
        self.handlers[name] = handler

    def send(self, text: str) -> None:
        if self.readyState != "open":
            raise RuntimeError("not open")
        self.sent.append(text)


def test_events_wait_for_the_channel_then_flow_and_are_dropped_when_congested_or_closed() -> None:
    sink = ChannelEventSink()
    sink.emit(StateEvent(state="thinking"))  # before the client's channel even arrived
    channel = FakeChannel()
    sink.use(channel)  # type: ignore[arg-type]
    sink.emit(StateEvent(state="speaking"))
    assert channel.sent == []
    channel.readyState = "open"
    channel.handlers["open"]()  # type: ignore[operator]
    assert [json.loads(m)["state"] for m in channel.sent] == ["thinking", "speaking"]
    channel.bufferedAmount = 10_000_000
    sink.emit(StateEvent(state="listening"))
    assert len(channel.sent) == 2 and sink.dropped == 1
    channel.bufferedAmount = 0
    channel.readyState = "closed"
    sink.emit(StateEvent(state="listening"))  # never raises
    sink.close()
    sink.emit(StateEvent(state="listening"))
    assert sink.dropped == 3


# ---- ICE ------------------------------------------------------------------------------------------

def test_ice_hosts_replace_aioice_host_discovery_and_empty_restores_it() -> None:
    original = aioice.ice.get_host_addresses
    try:
        assert configure_ice_hosts(["127.0.0.1", "not-an-ip", "::1", "127.0.0.1"]) == ["127.0.0.1", "::1"]
        assert aioice.ice.get_host_addresses(use_ipv4=True, use_ipv6=False) == ["127.0.0.1"]
        assert aioice.ice.get_host_addresses(use_ipv4=True, use_ipv6=True) == ["127.0.0.1", "::1"]
        configure_ice_hosts([])
        assert "127.0.0.1" not in aioice.ice.get_host_addresses(use_ipv4=True, use_ipv6=False)
    finally:
        aioice.ice.get_host_addresses = original  # type: ignore[assignment]
    assert parse_ice_hosts(["[::1]", " 192.0.2.1 "]) == ["::1", "192.0.2.1"]


def test_ice_servers_come_from_config_and_none_means_none() -> None:
    assert rtc_configuration([]).iceServers == []
    configured = rtc_configuration([IceServer(urls=["turn:turn.example.com:3478"], username="u", credential="p")])
    assert configured.iceServers is not None
    server = configured.iceServers[0]
    assert (server.urls, server.username, server.credential) == (["turn:turn.example.com:3478"], "u", "p")


@pytest.mark.parametrize("rate", [8000, 16000])
def test_outbound_frames_are_twenty_ms_at_either_pipeline_rate(rate: int) -> None:
    track = AgentAudioTrack(rate)
    frame = asyncio.run(audio_frame(track))
    assert frame.samples == rate // 50
    track.stop()
