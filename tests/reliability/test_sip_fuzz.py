"""SIP fuzzing against the whole server: mutated and generated messages over UDP and TCP.

The server must never die, must keep answering, and must still take a normal call afterwards; no
session may be left behind once the fuzz's half-made calls have timed out.

`make test` sends 20,000 messages over UDP and 1,200 over 300 TCP connections; `make soak` ten times as
many (tests/scale.py).
"""

from __future__ import annotations

import asyncio
import random
import socket
from pathlib import Path

import pytest

from tests.pipeline.conftest import ScriptedStt
from tests.scale import scaled
from tests.sip.conftest import eventually, free_port, run_sipp
from voicegate.internal.config import load_config
from voicegate.server.gateway import Gateway

pytestmark = pytest.mark.slow

# Full size in `make test` too: sending takes a second or two of the ~33 s (measured at 4,000 messages:
# the same 33 s); the rest is the ACK timeout below.
UDP_MESSAGES = scaled(20_000, 20_000)
TCP_CONNECTIONS = scaled(300, 300)

INVITE = (
    "INVITE sip:agent@127.0.0.1 SIP/2.0\r\n"
    "Via: SIP/2.0/UDP 127.0.0.1:5999;branch=z9hG4bK{n}\r\n"
    "Max-Forwards: 70\r\n"
    "From: \"Fuzz\" <sip:+15550001111@127.0.0.1>;tag=f{n}\r\n"
    "To: <sip:agent@127.0.0.1>\r\n"
    "Call-ID: fuzz-{n}@127.0.0.1\r\n"
    "CSeq: 1 INVITE\r\n"
    "Contact: <sip:fuzz@127.0.0.1:5999>\r\n"
    "Content-Type: application/sdp\r\n"
    "Content-Length: {length}\r\n\r\n{body}"
)
SDP = ("v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
       "m=audio 40000 RTP/AVP 0 8 101\r\na=rtpmap:101 telephone-event/8000\r\n")
SIMPLE = [
    "OPTIONS sip:agent@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5999;branch=z9hG4bKo{n}\r\n"
    "From: <sip:a@127.0.0.1>;tag=o{n}\r\nTo: <sip:agent@127.0.0.1>\r\nCall-ID: o{n}\r\nCSeq: 1 OPTIONS\r\n"
    "Content-Length: 0\r\n\r\n",
    "BYE sip:agent@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5999;branch=z9hG4bKb{n}\r\n"
    "From: <sip:a@127.0.0.1>;tag=b{n}\r\nTo: <sip:agent@127.0.0.1>;tag=x\r\nCall-ID: b{n}\r\nCSeq: 2 BYE\r\n"
    "Content-Length: 0\r\n\r\n",
    "REGISTER sip:127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5999;branch=z9hG4bKr{n}\r\n"
    "From: <sip:a@127.0.0.1>;tag=r{n}\r\nTo: <sip:a@127.0.0.1>\r\nCall-ID: r{n}\r\nCSeq: 1 REGISTER\r\n"
    "Content-Length: 0\r\n\r\n",
    "SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 127.0.0.1:5999;branch=z9hG4bKs{n}\r\nFrom: <sip:a@x>;tag=1\r\n"
    "To: <sip:b@x>;tag=2\r\nCall-ID: s{n}\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n",
]
JUNK_TOKENS = [b"\x00", b"\xff\xfe", b"\r\n", b"\n", b" ", b":", b";", b"<", b">", b"\"", b"SIP/2.0", b"INVITE",
               b"Content-Length: 99999999", b"Content-Length: -1", b"Via:", b"%", b"\t", b"=" * 300]


def seed_message(rng: random.Random, n: int) -> bytes:
    if rng.random() < 0.5:
        return INVITE.format(n=n, length=len(SDP), body=SDP).encode()
    return rng.choice(SIMPLE).format(n=n).encode()


def mutate(rng: random.Random, message: bytes) -> bytes:
    data = bytearray(message)
    for _ in range(rng.randint(1, 6)):
        choice = rng.randrange(8)
        position = rng.randrange(len(data) + 1)
        if choice == 0 and data:  # flip a byte
            data[min(position, len(data) - 1)] = rng.randrange(256)
        elif choice == 1:  # truncate
            del data[position:]
        elif choice == 2:  # insert junk
            data[position:position] = rng.choice(JUNK_TOKENS)
        elif choice == 3 and data:  # delete a span
            del data[position:position + rng.randint(1, 40)]
        elif choice == 4:  # duplicate a line
            lines = bytes(data).split(b"\r\n")
            line = rng.choice(lines)
            lines.insert(rng.randrange(len(lines) + 1), line)
            data = bytearray(b"\r\n".join(lines))
        elif choice == 5:  # drop a line
            lines = bytes(data).split(b"\r\n")
            if len(lines) > 1:
                lines.pop(rng.randrange(len(lines)))
            data = bytearray(b"\r\n".join(lines))
        elif choice == 6:  # a very long header value
            data[position:position] = b"\r\nX-Long: " + b"a" * rng.choice([100, 5000, 70_000])
        else:  # bare LF instead of CRLF
            data = bytearray(bytes(data).replace(b"\r\n", b"\n", rng.randint(1, 5)))
    return bytes(data)


def corpus(rng: random.Random, count: int) -> list[bytes]:
    out = []
    for n in range(count):
        if rng.random() < 0.1:
            out.append(rng.randbytes(rng.randint(0, 1500)))  # pure garbage
        else:
            out.append(mutate(rng, seed_message(rng, n)))
    return out


@pytest.fixture
async def gateway(tmp_path: Path):  # type: ignore[no-untyped-def]
    config = load_config(None)
    config.server.data_dir = str(tmp_path / "data")
    config.sip.bind = f"127.0.0.1:{free_port()}"
    base = random.Random(str(tmp_path)).randrange(30000, 60000, 2)
    config.sip.rtp_port_min, config.sip.rtp_port_max = base, base + 400
    config.sip.invite_rate_per_min = 0
    config.server.max_sessions = 8
    config.pipeline.greeting = ""
    live = Gateway(config, stt=ScriptedStt([]))
    await live.start()
    yield live
    await live.stop()


def options_answered(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5)
        sock.bind(("127.0.0.1", 0))
        local = sock.getsockname()[1]
        probe = SIMPLE[0].format(n="probe").replace("127.0.0.1:5999", f"127.0.0.1:{local}")
        sock.sendto(probe.encode(), ("127.0.0.1", port))
        try:
            reply, _ = sock.recvfrom(65536)
        except TimeoutError:
            return False
        return reply.startswith(b"SIP/2.0 200")


async def test_hostile_messages_never_take_the_server_down(
        gateway: Gateway, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    port = gateway.config.sip.bind_port
    created: list[str] = []
    assert gateway.sessions is not None
    original_create = gateway.sessions.create

    def counting_create(*args, **kwargs):  # type: ignore[no-untyped-def]
        session = original_create(*args, **kwargs)
        created.append(session.id)
        return session

    gateway.sessions.create = counting_create  # type: ignore[method-assign]
    rng = random.Random(4475)
    messages = corpus(rng, UDP_MESSAGES)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    for start in range(0, len(messages), 200):  # paced a little, so the socket buffer is not the filter
        for message in messages[start:start + 200]:
            try:
                udp.sendto(message[:65000], ("127.0.0.1", port))
            except OSError:
                pass
        await asyncio.sleep(0.02)
    udp.close()

    async def tcp_session(batch: list[bytes]) -> None:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
        except (OSError, TimeoutError):
            return
        try:
            for message in batch:
                writer.write(message)
            await asyncio.wait_for(writer.drain(), 10)
            await asyncio.wait_for(reader.read(4096), 0.5)
        except (OSError, TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    tcp_corpus = corpus(random.Random(8), TCP_CONNECTIONS * 4)
    for start in range(0, len(tcp_corpus), 40):
        await asyncio.gather(*(tcp_session(tcp_corpus[i:i + 4]) for i in range(start, start + 40, 4)))

    assert gateway.started and gateway.sip is not None
    assert await asyncio.to_thread(options_answered, port), "the server stopped answering"
    # Half-made calls from mutated INVITEs are never ACKed: they end at the ACK timeout (64 x T1).
    assert gateway.sessions is not None
    await eventually(lambda: len(gateway.sessions) == 0, timeout=90, what="fuzz sessions to end")  # type: ignore[arg-type]
    assert created, "no mutated INVITE got through to a call: the fuzz is too weak"
    crashes = [r for r in caplog.records if r.exc_info and r.name.startswith("voicegate.internal.sip")]
    assert not crashes, [r.getMessage() for r in crashes[:5]]
    result = await run_sipp(tmp_path, "uac_call.xml", f"127.0.0.1:{port}")
    result.check()
    await eventually(lambda: len(gateway.sessions) == 0, timeout=30, what="the normal call to end")  # type: ignore[arg-type]
