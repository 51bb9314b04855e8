"""A flood of INVITEs from one address is rate limited (503 + Retry-After); other callers are still served."""

from __future__ import annotations

import asyncio
import random
import socket
from pathlib import Path

import pytest

from tests.pipeline.conftest import ScriptedStt
from tests.sip.conftest import eventually, free_port, run_sipp
from voicegate.internal.config import load_config
from voicegate.server.gateway import Gateway

pytestmark = pytest.mark.slow

FLOOD = 150
G729_ONLY = "v=0\r\no=- 1 1 IN IP4 127.0.0.3\r\ns=-\r\nc=IN IP4 127.0.0.3\r\nt=0 0\r\nm=audio 40000 RTP/AVP 18\r\n"


def invite(n: int, local_port: int) -> bytes:
    return (
        f"INVITE sip:agent@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.3:{local_port};branch=z9hG4bKflood{n}\r\n"
        f"Max-Forwards: 70\r\nFrom: <sip:+15550002222@127.0.0.3>;tag=fl{n}\r\nTo: <sip:agent@127.0.0.1>\r\n"
        f"Call-ID: flood-{n}\r\nCSeq: 1 INVITE\r\nContact: <sip:f@127.0.0.3:{local_port}>\r\n"
        f"Content-Type: application/sdp\r\nContent-Length: {len(G729_ONLY)}\r\n\r\n{G729_ONLY}"
    ).encode()


def call_id(reply: bytes) -> bytes:
    for line in reply.split(b"\r\n"):
        if line.lower().startswith((b"call-id:", b"i:")):
            return line.split(b":", 1)[1].strip()
    return b""


def flood(port: int) -> list[bytes]:
    """Send the INVITEs from 127.0.0.3 and collect the final response of each (we never ACK, so
    the server retransmits them; duplicates are dropped)."""
    finals: dict[bytes, bytes] = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.3", 0))
        local = sock.getsockname()[1]
        for n in range(FLOOD):
            sock.sendto(invite(n, local), ("127.0.0.1", port))
        sock.settimeout(3)
        while True:
            try:
                reply, _ = sock.recvfrom(65536)
            except TimeoutError:
                return list(finals.values())
            status = reply.split(b" ", 2)[1] if reply.startswith(b"SIP/2.0") else b""
            if status and status[:1] != b"1":
                finals.setdefault(call_id(reply), reply)


async def test_an_invite_flood_is_limited_while_another_caller_gets_through(tmp_path: Path) -> None:
    config = load_config(None)
    config.server.data_dir = str(tmp_path / "data")
    config.sip.bind = f"0.0.0.0:{free_port()}"
    base = random.Random(str(tmp_path)).randrange(30000, 60000, 2)
    config.sip.rtp_port_min, config.sip.rtp_port_max = base, base + 200
    config.sip.invite_rate_per_min = 30
    config.pipeline.greeting = ""
    gateway = Gateway(config, stt=ScriptedStt([]))
    await gateway.start()
    try:
        port = config.sip.bind_port
        finals = await asyncio.to_thread(flood, port)
        refused = [r for r in finals if r.startswith(b"SIP/2.0 503")]
        assert len(finals) == FLOOD
        assert len(refused) >= FLOOD - 40, f"only {len(refused)} of {FLOOD} were rate limited"
        assert all(b"Retry-After:" in r for r in refused)
        # A different caller is not affected by one address's flood.
        result = await run_sipp(tmp_path, "uac_call.xml", f"127.0.0.1:{port}", extra=["-i", "127.0.0.2"])
        result.check()
        assert gateway.sessions is not None
        await eventually(lambda: len(gateway.sessions) == 0, timeout=30, what="sessions to end")  # type: ignore[arg-type]
    finally:
        await gateway.stop()
