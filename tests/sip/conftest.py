"""Fixtures for the SIP tests: a recording CallHandler, a UserAgent on free ports, a sipp runner."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import free_port as free_port  # one definition (the tests here import it from this module)
from tests.conftest import ports_free
from voicegate.internal.config.sections import SipConfig
from voicegate.internal.sip import (
    CallRejected,
    Dialog,
    IncomingCall,
    Rejection,
    SessionDescription,
    SipMessage,
    SipParseError,
    SipRequest,
    SipResponse,
    TimerSettings,
    UserAgent,
    build_answer,
    negotiate,
    parse,
)

SCENARIOS = Path(__file__).parent / "scenarios"
SIPP = "/usr/bin/sipp"


def _ephemeral_port() -> int:
    """A port free for both UDP and TCP, as the kernel picks one (for sipp's media base, which needs room above)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind(("127.0.0.1", 0))
            port = int(udp.getsockname()[1])
        if ports_free(port):
            return port
    raise RuntimeError("no free port")


# sipp's [auto_media_port] is P + (4 * (call - 1)) % 10000: a long run (the soak's 3000 calls) offers ports up
# to P + 9996, and a P past 65535 - 10000 puts ports above 65535 in its SDP, which the server rightly refuses.
SIPP_AUTO_MEDIA_SPAN = 10000


def free_media_ports() -> int:
    """An even port P with P..P+3 free for UDP: sipp binds audio RTP/RTCP there and video on P+2/P+3.
    P is low enough that every port sipp's [auto_media_port] can derive from it is a valid one."""
    for _ in range(100):
        base = _ephemeral_port() & ~1
        if base + SIPP_AUTO_MEDIA_SPAN + 4 > 65536:
            continue
        sockets: list[socket.socket] = []
        try:
            for port in range(base, base + 4):
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
        return base
    raise RuntimeError("no four free ports in a row")


async def eventually(predicate: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    """Poll until `predicate` holds; generous timeouts because the machine may be loaded."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@dataclass
class RecordingHandler:
    """A CallHandler that answers with a fixed G.711 SDP and records every callback."""

    rejection: Rejection | None = None
    answer_error: Exception | None = None
    answer_delay: float = 0.0
    admitted: list[IncomingCall] = field(default_factory=list)
    answered: list[IncomingCall] = field(default_factory=list)
    confirmed_dialogs: list[Dialog] = field(default_factory=list)
    reinvites: list[SessionDescription | None] = field(default_factory=list)
    endings: list[tuple[Dialog, str]] = field(default_factory=list)

    def admit(self, call: IncomingCall) -> Rejection | None:
        self.admitted.append(call)
        return self.rejection

    async def answer(self, call: IncomingCall, dialog: Dialog) -> SessionDescription:
        self.answered.append(call)
        if self.answer_delay:
            await asyncio.sleep(self.answer_delay)
        if self.answer_error is not None:
            raise self.answer_error
        if call.offer is None:
            raise CallRejected(488, "Offer Required")
        negotiated = negotiate(call.offer)
        return build_answer(negotiated, "127.0.0.1", 40000, 1, offer=call.offer)

    async def confirmed(self, dialog: Dialog) -> None:
        self.confirmed_dialogs.append(dialog)

    async def reinvite(self, dialog: Dialog, offer: SessionDescription | None) -> SessionDescription:
        self.reinvites.append(offer)
        assert offer is not None
        negotiated = negotiate(offer)
        return build_answer(negotiated, "127.0.0.1", 40000, 1, offer=offer, session_version=2)

    @property
    def reasons(self) -> list[str]:
        return [reason for _, reason in self.endings]

    async def ended(self, dialog: Dialog, reason: str) -> None:
        self.endings.append((dialog, reason))


def sip_config(**overrides: object) -> SipConfig:
    values: dict[str, object] = {"transports": ["udp", "tcp"], "invite_rate_per_min": 0, "user_agent": "voicegate-test"}
    values.update(overrides)
    return SipConfig(**values)  # type: ignore[arg-type]


UaFactory = Callable[..., Awaitable[UserAgent]]


@pytest.fixture
async def make_ua() -> AsyncIterator[UaFactory]:
    """Start UserAgents on 127.0.0.1 with a free port; shut them all down afterwards."""
    started: list[UserAgent] = []

    async def factory(
        handler: object,
        *,
        timers: TimerSettings | None = None,
        digest_algorithms: tuple[str, ...] = ("SHA-256", "MD5"),
        **config: object,
    ) -> UserAgent:
        ua = UserAgent(
            sip_config(**config), handler, timers=timers, bind=("127.0.0.1", 0),  # type: ignore[arg-type]
            digest_algorithms=digest_algorithms,
        )
        await ua.start()
        started.append(ua)
        return ua

    yield factory
    for ua in started:
        await ua.shutdown(timeout_s=2)


@dataclass
class SippResult:
    returncode: int
    output: str

    def check(self) -> None:
        assert self.returncode == 0, f"sipp failed (rc={self.returncode}):\n{self.output[-4000:]}"


def _read_logs(directory: Path) -> str:
    return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')}" for log in sorted(directory.glob("*.log")))


async def run_sipp(
    tmp_path: Path,
    scenario: str | Path,
    remote: str | None,
    *,
    local_port: int | None = None,
    transport: str = "u1",
    extra: list[str] | None = None,
    timeout: float = 40.0,
) -> SippResult:
    """Run one sipp call to completion; killed if it outlives `timeout` (never blocks the loop)."""
    path = Path(scenario)
    if not path.is_absolute():
        path = SCENARIOS / path
    args = [SIPP]
    if remote:
        args.append(remote)
    args += [
        "-sf", str(path), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-m", "1", "-nostdin", "-timeout",
        f"{int(timeout) - 5}s", "-timeout_error", "-trace_err", "-trace_msg", "-t", transport, *(extra or []),
    ]
    for _attempt in range(3):
        ports = ["-p", str(local_port or free_port()), "-mp", str(free_media_ports())]
        result = await _run_sipp_once([*args, *ports], tmp_path, timeout)
        # A port picked as free can be taken by another test before sipp binds it; sipp then stops
        # before sending anything, so running it again on other ports changes nothing else.
        if result.returncode == 0 or "errno = 98" not in result.output:
            return result
        for log in tmp_path.glob("*.log"):
            log.unlink()
    return result


async def _run_sipp_once(args: list[str], tmp_path: Path, timeout: float) -> SippResult:
    proc = await asyncio.create_subprocess_exec(
        *args, cwd=tmp_path, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    try:
        _, stderr = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        stderr = b"(killed: test timeout)"
    except asyncio.CancelledError:
        proc.kill()
        await proc.wait()
        raise
    logs = await asyncio.to_thread(_read_logs, tmp_path)
    return SippResult(proc.returncode if proc.returncode is not None else -1, stderr.decode(errors="replace") + logs)


class RawPeer(asyncio.DatagramProtocol):
    """A hand-driven SIP peer on UDP: send text, read parsed messages; for cases sipp cannot script."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[SipMessage] = asyncio.Queue()
        self.transport: asyncio.DatagramTransport | None = None
        self.port = 0

    @staticmethod
    async def open() -> RawPeer:
        loop = asyncio.get_running_loop()
        _, peer = await loop.create_datagram_endpoint(RawPeer, local_addr=("127.0.0.1", 0))
        return peer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # the selector transport is not a subclass
        self.port = transport.get_extra_info("sockname")[1]

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        try:
            self.queue.put_nowait(parse(data))
        except SipParseError:
            pass

    def send(self, data: bytes | SipMessage, port: int) -> None:
        assert self.transport is not None
        payload = data.serialise() if isinstance(data, SipMessage) else data
        self.transport.sendto(payload, ("127.0.0.1", port))

    async def receive(self, timeout: float = 20.0) -> SipMessage:
        return await asyncio.wait_for(self.queue.get(), timeout)

    async def response(self, status: int, timeout: float = 20.0) -> SipResponse:
        """The next response with `status`, skipping others (provisionals, retransmissions)."""
        while True:
            message = await self.receive(timeout)
            if isinstance(message, SipResponse) and message.status == status:
                return message

    async def request(self, method: str, timeout: float = 20.0) -> SipRequest:
        while True:
            message = await self.receive(timeout)
            if isinstance(message, SipRequest) and message.method == method:
                return message

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


OFFER = (
    "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
    "m=audio 6000 RTP/AVP 0 101\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:101 telephone-event/8000\r\n"
)


def sip_text(
    method: str,
    peer_port: int,
    ua_port: int,
    *,
    call_id: str = "call-1",
    cseq: int = 1,
    branch: str | None = None,
    to_tag: str = "",
    uri: str | None = None,
    extra: tuple[str, ...] = (),
    body: str = "",
    content_type: str = "application/sdp",
    version: str = "SIP/2.0",
) -> bytes:
    """A request from a RawPeer to the UA, as text (so tests can also make it wrong on purpose)."""
    to = f"<sip:agent@127.0.0.1:{ua_port}>" + (f";tag={to_tag}" if to_tag else "")
    lines = [
        f"{method} {uri or f'sip:agent@127.0.0.1:{ua_port}'} {version}",
        f"Via: SIP/2.0/UDP 127.0.0.1:{peer_port};branch={branch or 'z9hG4bK-' + method.lower() + str(cseq)}",
        f"From: <sip:+15551234567@127.0.0.1:{peer_port}>;tag=peer",
        f"To: {to}",
        f"Call-ID: {call_id}",
        f"CSeq: {cseq} {method}",
        f"Contact: <sip:peer@127.0.0.1:{peer_port}>",
        "Max-Forwards: 70",
        *extra,
    ]
    if body:
        lines.append(f"Content-Type: {content_type}")
    lines.append(f"Content-Length: {len(body.encode())}")
    return ("\r\n".join(lines) + "\r\n\r\n" + body).encode()
