"""Real phone calls against the whole server: a Gateway with SIP on free ports, sipp (and baresip) as peers.

The gateway runs in the test's own event loop, so a test can look at its sessions while a real SIP
client talks to it over real sockets. Scenario templates live in scenarios/ and are rendered per test
(sipp cannot template the SDP media port, the From user or file paths). To hear what voicegate says, a
test listens on a UDP port of its own (`RtpCapture`), puts that port in the caller's SDP and turns
symmetric RTP off, so the server sends there while sipp streams from its own media port.
"""

from __future__ import annotations

import asyncio
import random
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import tone_driven
from tests.sip.conftest import SippResult, eventually, free_port, run_sipp
from tests.speech import neural, silence, speak, transcribe
from voicegate.internal.audio.g711 import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode
from voicegate.internal.audio.rtp import RtpError, RtpPacket
from voicegate.internal.config import Config, load_config
from voicegate.internal.config.providers import PocketsphinxConfig, WhisperConfig
from voicegate.internal.conversation.transcript import TranscriptEntry
from voicegate.internal.session import Session, SessionManager
from voicegate.internal.stt.base import SpeechToText
from voicegate.internal.stt.pocketsphinx import PocketsphinxSpeechToText
from voicegate.internal.stt.whisper import WhisperSpeechToText
from voicegate.internal.tts.base import TextToSpeech
from voicegate.server.gateway import Gateway

__all__ = ["SippResult", "eventually", "free_port", "run_sipp"]

SCENARIOS = Path(__file__).parent / "scenarios"
FRAGMENTS = SCENARIOS / "fragments"
DTMF_1_PCAP = "/usr/share/sip-tester/dtmf_2833_1.pcap"  # one RFC 4733 event: the digit 1
CALLER = "+15551234567"

# What callers say in these tests; the server's pocketsphinx listens for exactly these (plus decoys,
# so a match means the words were told apart rather than forced onto the only phrase there is).
CALLER_PHRASES = ["say hello world", "okay goodbye", "my name is sam", "what time is it", "thank you", "who are you"]
# What the agent says back, for decoding the audio we capture.
REPLY_PHRASES = [
    "hello world", "goodbye thanks for calling", "you pressed one", "you pressed two",
    "welcome back sam how can i help you today", "hello how can i help", "nice to meet you sam",
    "this is an outgoing call", "thank you", "you're welcome",
]

PCMU_OFFER = ("0 101", "a=rtpmap:0 PCMU/8000\n      a=rtpmap:101 telephone-event/8000\n      a=fmtp:101 0-15")
PCMA_OFFER = ("8 101", "a=rtpmap:8 PCMA/8000\n      a=rtpmap:101 telephone-event/8000\n      a=fmtp:101 0-15")
G729_OFFER = ("18", "a=rtpmap:18 G729/8000")
# What sipp's callee (uas_answer.xml) answers with: PCMU and telephone-event, or PCMU alone.
PCMU_DTMF_ANSWER = ("m=audio MEDIA_PORT RTP/AVP 0 101\n      a=rtpmap:0 PCMU/8000\n"
                    "      a=rtpmap:101 telephone-event/8000")
PCMU_ONLY_ANSWER = "m=audio MEDIA_PORT RTP/AVP 0\n      a=rtpmap:0 PCMU/8000"


# ---- audio ------------------------------------------------------------------------------------------


def caller_audio(directory: Path, text: str, codec: str = "PCMU", *, lead_ms: int = 400,
                 tail_ms: int = 1200) -> Path:
    """espeak-ng saying `text` as a RAW G.711 file for sipp's rtp_stream, with silence around it so
    the server's VAD sees the speech start and end."""
    pcm = bytes(8 * lead_ms * 2) + speak(text, 8000) + bytes(8 * tail_ms * 2)
    encode = ulaw_encode if codec == "PCMU" else alaw_encode
    path = directory / f"caller-{abs(hash(text)) % 10**8}.{codec.lower()}"
    path.write_bytes(encode(pcm))
    return path


def loud_part(pcm: bytes, rate: int = 8000, threshold_dbfs: float = -45.0, margin_ms: int = 300) -> bytes:
    """`pcm` cut to its audible stretch (plus a margin): comfort silence around a reply is not speech."""
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float32)
    window = rate // 50
    loud = [
        index for index in range(len(samples) // window)
        if (energy := float(np.dot(w := samples[index * window:(index + 1) * window], w)) / window) > 0
        and 10 * np.log10(energy / 32768**2) > threshold_dbfs
    ]
    if not loud:
        return b""
    margin = margin_ms // 20
    start, end = max(loud[0] - margin, 0), min(loud[-1] + 1 + margin, len(samples) // window)
    return pcm[start * window * 2:end * window * 2]


def best_match(haystack: bytes, needle: bytes) -> float:
    """The highest normalised cross-correlation of `needle` anywhere in `haystack` (both PCM16)."""
    return best_match_at(haystack, needle)[0]


def best_match_at(haystack: bytes, needle: bytes) -> tuple[float, int]:
    """`best_match` and the sample offset in `haystack` where it is."""
    h = np.frombuffer(haystack, dtype=np.int16).astype(np.float64)
    n = np.frombuffer(needle, dtype=np.int16).astype(np.float64)
    if not len(n) or len(h) < len(n):
        return 0.0, 0
    size = 1 << (len(h) + len(n)).bit_length()
    correlation = np.fft.irfft(np.fft.rfft(h, size) * np.conj(np.fft.rfft(n, size)), size)[: len(h) - len(n) + 1]
    energy = np.concatenate([[0.0], np.cumsum(h * h)])
    window = np.sqrt(np.maximum(energy[len(n):] - energy[: -len(n)], 1e-9))
    scores = correlation / (window * np.linalg.norm(n))
    best = int(np.argmax(scores))
    return float(scores[best]), best


# ---- hearing what voicegate sends -------------------------------------------------------------------


@dataclass
class Received:
    packet: RtpPacket
    at: float  # loop time of arrival


class RtpCapture(asyncio.DatagramProtocol):
    """A UDP port the test owns: every RTP packet voicegate sends to it, decoded on demand."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.transport: asyncio.DatagramTransport | None = None
        self.port = 0

    @staticmethod
    async def open() -> RtpCapture:
        loop = asyncio.get_running_loop()
        _, capture = await loop.create_datagram_endpoint(RtpCapture, local_addr=("127.0.0.1", 0))
        return capture

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.port = transport.get_extra_info("sockname")[1]

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        try:
            packet = RtpPacket.parse(data)
        except RtpError:
            return
        self.received.append(Received(packet, asyncio.get_running_loop().time()))

    def packets(self, payload_types: tuple[int, ...] = (0, 8)) -> list[RtpPacket]:
        return [r.packet for r in self.received if r.packet.payload_type in payload_types]

    def pcm(self) -> bytes:
        """Every audio packet decoded to 8 kHz PCM16, in arrival order (loopback does not reorder)."""
        decoders = {0: ulaw_decode, 8: alaw_decode}
        return b"".join(decoders[p.payload_type](p.payload) for p in self.packets())

    def heard(self, phrases: list[str] | None = None) -> str:
        """What pocketsphinx makes of the loud part of everything voicegate sent."""
        speech = loud_part(self.pcm())
        return transcribe(speech, 8000, phrases or REPLY_PHRASES) if speech else ""

    async def played(self, text: str, tts: TextToSpeech) -> float:
        """How surely voicegate's audio contains `text` as the server's own TTS says it: the worst,
        over the reply's sentences, of the best normalised cross-correlation (1.0: sample-exact).

        pocketsphinx's 16 kHz model hears espeak's telephone-band speech poorly: "Hello world." and
        "Welcome back, Sam!" decode reliably, "You pressed 1." and "Goodbye. Thanks for calling." do not.
        So replies are checked against a reference rendering, and by ear (`heard`) where that works.
        """
        pcm = self.pcm()
        scores = []
        for sentence in re.split(r"(?<=[.!?])\s+", text.strip()):
            reference = b"".join([chunk async for chunk in tts.synthesize(sentence, 8000)])
            scores.append(best_match(pcm, loud_part(ulaw_decode(ulaw_encode(reference)), margin_ms=0)))
        return min(scores)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


# ---- scenarios --------------------------------------------------------------------------------------


def fragment(name: str, **values: object) -> str:
    text = (FRAGMENTS / f"{name}.xml").read_text()
    for key, value in values.items():
        text = text.replace(key, str(value))
    return text


def stream(audio: Path, codec: str = "PCMU") -> str:
    return fragment("stream_audio", AUDIO_FILE=audio, PAYLOAD_TYPE=0 if codec == "PCMU" else 8)


def caller_bye(talk_ms: int) -> str:
    return fragment("caller_bye", TALK_MS=talk_ms)


WAIT_FOR_BYE = "wait_for_bye"


def render(directory: Path, template: str = "uac_talk.xml", *, media: str = "", ending: str = "",
           offer: tuple[str, str] = PCMU_OFFER, media_port: int | str = "[media_port]",
           from_user: str = CALLER, extra_header: str = "X-Test: 1", answer_regexp: str = "m=audio [0-9]+ RTP/AVP",
           **values: object) -> Path:
    """A runnable copy of a scenario template: fragments spliced in, placeholders replaced."""
    text = (SCENARIOS / template).read_text()
    if ending == WAIT_FOR_BYE:
        ending = fragment(WAIT_FOR_BYE)
    text = text.replace("<!-- MEDIA -->", media).replace("<!-- ENDING -->", ending)
    placeholders: dict[str, object] = {
        "ANSWER_MEDIA": values.pop("ANSWER_MEDIA", PCMU_DTMF_ANSWER),
        "MEDIA_PORT": media_port, "OFFER_FORMATS": offer[0], "OFFER_RTPMAPS": offer[1], "FROM_USER": from_user,
        "EXTRA_HEADER": extra_header, "ANSWER_REGEXP": answer_regexp, **values,
    }
    for key, value in placeholders.items():
        text = text.replace(key, str(value))
    path = directory / f"scenario-{random.randrange(10**9)}-{template}"
    path.write_text(text)
    return path


# ---- the server -------------------------------------------------------------------------------------


def rtp_port_range() -> tuple[int, int]:
    """A private 200-port RTP range for one test (the allocator also skips ports others hold)."""
    low = random.randrange(30000, 59800) & ~1
    return low, low + 199


def sip_calls_config(tmp_path: Path, **sip: Any) -> Config:
    config = load_config(None)
    config.server.host = "127.0.0.1"
    config.server.data_dir = str(tmp_path / "data")
    config.sip.enabled = True
    config.sip.bind = f"127.0.0.1:{free_port()}"
    config.sip.transports = ["udp", "tcp"]
    config.sip.invite_rate_per_min = 0
    config.sip.rtp_port_min, config.sip.rtp_port_max = rtp_port_range()
    config.webrtc.enabled = False
    config.pipeline.greeting = ""
    config.pipeline.debug = True
    # Replies and silences here are timed by the tests: no idle prompt or thinking cue unless a test asks
    # (tests/sip_calls/test_idle_callers.py, test_thinking_cues.py).
    config.pipeline.idle_prompt_s = 0
    config.pipeline.thinking_cue = "off"
    config.pocketsphinx.phrases = CALLER_PHRASES
    tone_driven(config)
    # These tests check the reply's words with pocketsphinx grammars made for espeak-ng's voice, and give
    # the server a pocketsphinx of their own; test_whisper_calls.py runs the offline defaults end to end.
    config.stt.provider = "pocketsphinx"
    config.tts.provider = "espeak"
    config.pocketsphinx.workers = 1
    config.espeak.workers = 1
    for key, value in sip.items():
        setattr(config.sip, key, value)
    return config


@dataclass
class SipServer:
    """A started Gateway and what its calls left behind."""

    gateway: Gateway
    ended: list[Session] = field(default_factory=list)

    @property
    def config(self) -> Config:
        return self.gateway.config

    @property
    def sessions(self) -> SessionManager:
        assert self.gateway.sessions is not None
        return self.gateway.sessions

    @property
    def tts(self) -> TextToSpeech:
        assert self.gateway.tts is not None
        return self.gateway.tts

    @property
    def port(self) -> int:
        return int(self.gateway.sip.local_address().port)

    @property
    def target(self) -> str:
        """The remote argument for sipp."""
        return f"127.0.0.1:{self.port}"

    def transcripts(self) -> list[list[TranscriptEntry]]:
        return [s.conversation.transcript.entries() for s in self.ended]

    def live(self) -> Session:
        """The one live call (most tests place exactly one)."""
        live = self.sessions.sessions()
        assert len(live) == 1, f"expected one live call, found {len(live)}"
        return live[0]

    async def wait_live(self, count: int = 1, timeout: float = 30.0) -> list[Session]:
        """Sessions of `count` answered calls. A session opens while its call still rings, and a call
        that is not answered yet ends with a final error response (480, 503 at shutdown), not a BYE."""
        await eventually(lambda: len(self.sessions) >= count and self.answered() >= count, timeout,
                         f"{count} live call(s)")
        return self.sessions.sessions()

    def answered(self) -> int:
        """Calls whose INVITE got its 2xx and whose ACK arrived (outbound legs: once connected)."""
        assert self.gateway.sip is not None
        return sum(1 for leg in self.gateway.sip.calls.legs()
                   if not leg.ended and leg.awaiting_ack is None
                   and (leg.invite_txn is None or leg.invite_txn.final_sent))

    async def wait_ended(self, count: int = 1, timeout: float = 60.0) -> list[Session]:
        await eventually(lambda: len(self.ended) >= count, timeout, f"{count} ended call(s)")
        return self.ended

    async def hang_up(self, session: Session) -> None:
        """End a call from the server side (voicegate sends BYE), as shutdown or the agent would."""
        await self.sessions.end(session, "test hung up")


async def agent_said(session: Session, containing: str = "", timeout: float = 60.0) -> list[TranscriptEntry]:
    """Wait until the agent has finished saying something (with `containing` in it): entries are
    recorded once their audio has been played out. Returns the transcript so far."""

    def done() -> bool:
        return any(e.role == "agent" and containing in e.text for e in session.conversation.transcript.entries())

    try:
        await eventually(done, timeout, f"the agent to say {containing!r}" if containing else "an agent reply")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the transcript so far: {session.conversation.transcript.entries()}") from None
    return session.conversation.transcript.entries()


ServerFactory = Callable[..., Awaitable[SipServer]]


@pytest.fixture(scope="session")
def caller_stt() -> Iterator[PocketsphinxSpeechToText]:
    """One pocketsphinx (one worker process) per test process, listening for CALLER_PHRASES."""
    stt = PocketsphinxSpeechToText(PocketsphinxConfig(phrases=CALLER_PHRASES, workers=1))
    yield stt
    asyncio.run(stt.aclose())


@asynccontextmanager
async def running(config: Config, stt: SpeechToText, **providers: Any) -> AsyncIterator[SipServer]:
    gateway = Gateway(config, stt=stt, **providers)
    await gateway.start()
    server = SipServer(gateway)

    async def record(session: Session) -> None:
        server.ended.append(session)

    server.sessions.add_end_hook(record)
    try:
        yield server
    finally:
        await gateway.stop()


@pytest.fixture
async def make_server(tmp_path: Path, caller_stt: PocketsphinxSpeechToText) -> AsyncIterator[ServerFactory]:
    """Start a Gateway with SIP on free ports: `await make_server(stt=..., config=..., model=..., **sip_keys)`."""
    servers: list[Any] = []

    async def factory(*, stt: SpeechToText | None = None, config: Config | None = None, model: Any = None,
                      **sip: Any) -> SipServer:
        cfg = config or sip_calls_config(tmp_path, **sip)
        context = running(cfg, stt or caller_stt, **({"model": model} if model is not None else {}))
        server = await context.__aenter__()
        servers.append(context)
        return server

    yield factory
    for context in reversed(servers):
        await context.__aexit__(None, None, None)


@pytest.fixture
async def whisper(tmp_path: Path) -> AsyncIterator[WhisperSpeechToText]:
    """Whisper tiny.en in one worker: a server's recogniser, or the test's ear on what was sent."""
    engine = WhisperSpeechToText(WhisperConfig(workers=1), tmp_path / "models")
    yield engine
    await engine.aclose()


@pytest.fixture
async def capture() -> AsyncIterator[RtpCapture]:
    rtp = await RtpCapture.open()
    yield rtp
    rtp.close()


def udp_port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def neural_caller(directory: Path, text: str) -> Path:
    """The Piper voice saying `text` as a RAW mu-law file for sipp, with silence around it for the VAD
    (speech the offline defaults were not tuned on, unlike espeak-ng's)."""
    pcm = silence(400, 8000) + neural([text], 8000)[0] + silence(1500, 8000)
    path = directory / f"caller-{abs(hash(text)) % 10**8}.pcmu"
    path.write_bytes(ulaw_encode(pcm))
    return path


@pytest.fixture
async def http_server(tmp_path: Path) -> AsyncIterator[Any]:
    """`await http_server(config, finals, model)`: the whole app (gateway started, a ScriptedStt hearing
    `finals`, the configured model or `model`) and an HTTP client for it, both closed after the test."""
    import httpx

    from tests.pipeline.conftest import ScriptedStt
    from voicegate.server.app import create_gateway_application

    started: list[tuple[SipServer, httpx.AsyncClient]] = []

    async def factory(config: Config, finals: list[str] | None = None,
                      model: Any = None) -> tuple[SipServer, httpx.AsyncClient]:
        app = create_gateway_application(config, stt=ScriptedStt(finals or []), model=model)
        gateway = app.state.gateway
        await gateway.start()
        server = SipServer(gateway)

        async def record(session: Any) -> None:
            server.ended.append(session)

        server.sessions.add_end_hook(record)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://voicegate", timeout=60)
        started.append((server, client))
        return server, client

    yield factory
    for server, client in started:
        await client.aclose()
        await server.gateway.stop()


def outbound_cli_config(tmp_path: Path, greeting: str, engines: str) -> Path:
    """A config file for `voicegate call` run as its own process: loopback SIP on a port of its own, an RTP
    range of this worker's, no WebRTC, the outgoing greeting, and `engines` (the [stt]/[tts]/... sections)."""
    low = sip_calls_config(tmp_path).sip.rtp_port_min
    path = tmp_path / "voicegate.toml"
    path.write_text(f"""
[server]
data_dir = "{tmp_path / 'data'}"
[sip]
bind = "127.0.0.1:{free_port()}"
rtp_port_min = {low}
rtp_port_max = {low + 199}
symmetric_rtp = false
[webrtc]
enabled = false
[pipeline]
greeting_outgoing = "{greeting}"
{engines}""")
    return path
