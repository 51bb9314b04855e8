"""A UDP tap between sipp and voicegate on 127.0.0.1 for bench/turns/voice_to_voice.py: it passes SIP and RTP
both ways, rewrites the audio port of voicegate's SDP answer to its own, and keeps every RTP packet with
the kernel's receive time (SO_TIMESTAMPNS), so both directions are read on the wire with no root and no
packet capture.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; Python does not export the constant
Address = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Heard:
    at: float  # kernel receive time, seconds since the epoch
    data: bytes


def timestamped_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    return sock


def receive(sock: socket.socket) -> tuple[bytes, Address, float]:
    data, ancillary, _, source = sock.recvmsg(65536, socket.CMSG_SPACE(16))
    for level, kind, value in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            seconds, nanoseconds = struct.unpack("qq", value[:16])
            return data, source, seconds + nanoseconds / 1e9
    return data, source, time.time()


def answer_through(message: bytes, media_port: int) -> tuple[bytes, Address | None]:
    """A SIP message with its SDP's audio port changed to `media_port` (Content-Length to match), and
    the media address the SDP gave, if it has one."""
    head, separator, body = message.partition(b"\r\n\r\n")
    port = re.search(rb"^m=audio (\d+)", body, re.M)
    host = re.search(rb"^c=IN IP4 (\S+)", body, re.M)
    if not separator or port is None or host is None:
        return message, None
    body = body[:port.start(1)] + str(media_port).encode() + body[port.end(1):]
    head = re.sub(rb"(?im)^(content-length|l)[ \t]*:[ \t]*\d+", rb"\1: " + str(len(body)).encode(), head)
    return head + separator + body, (host.group(1).decode(), int(port.group(1)))


class WireTap:
    """Relays SIP and the caller's RTP to voicegate and receives voicegate's RTP, keeping every audio
    packet of both directions with the time it arrived."""

    def __init__(self, server: Address) -> None:
        self.server = server
        self.caller: list[Heard] = []
        self.reply: list[Heard] = []
        self.call_id = ""
        # Signalling, for bench/capacity/overload.py: when the INVITE went out, the final response to it
        # (status, arrival) and when voicegate sent a BYE through the tap (a request to sipp's Contact goes
        # past it), on time.time()'s clock.
        self.invite_at: float | None = None
        self.final: tuple[int, float] | None = None
        self.server_bye_at: float | None = None
        self._sip, self._media = timestamped_socket(), timestamped_socket()
        self._sipp: Address | None = None
        self._server_media: Address | None = None
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._pump, args=(self._sip, self._on_sip), daemon=True),
                         threading.Thread(target=self._pump, args=(self._media, self._on_media), daemon=True)]

    @property
    def sip_port(self) -> int:
        return int(self._sip.getsockname()[1])

    @property
    def media_port(self) -> int:
        return int(self._media.getsockname()[1])

    def __enter__(self) -> WireTap:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self._sip.close()
        self._media.close()

    def _pump(self, sock: socket.socket, handle: Callable[[bytes, Address, float], None]) -> None:
        while not self._stop.is_set():
            try:
                handle(*receive(sock))
            except TimeoutError:
                continue
            except OSError:  # ICMP from a peer that has gone (sipp after its BYE)
                continue

    def _on_sip(self, data: bytes, source: Address, at: float) -> None:
        if source == self.server:
            status = re.match(rb"SIP/2\.0 (\d{3})", data)
            if status and int(status.group(1)) >= 200 and self.final is None \
                    and re.search(rb"(?im)^cseq[ \t]*:[ \t]*\d+ INVITE", data):
                self.final = (int(status.group(1)), at)
            elif data.startswith(b"BYE ") and self.server_bye_at is None:
                self.server_bye_at = at
            data, media = answer_through(data, self.media_port)
            self._server_media = media or self._server_media
            if self._sipp is not None:
                self._sip.sendto(data, self._sipp)
            return
        self._sipp = source
        if data.startswith(b"INVITE ") and self.invite_at is None:
            self.invite_at = at
        found = re.search(rb"(?im)^(?:call-id|i)[ \t]*:[ \t]*(\S+)", data)
        self.call_id = self.call_id or (found.group(1).decode() if found else "")
        self._sip.sendto(data, self.server)

    def _on_media(self, data: bytes, source: Address, at: float) -> None:
        if source == self._server_media:
            self.reply.append(Heard(at, data))
        elif self._server_media is not None:
            self.caller.append(Heard(at, data))
            self._media.sendto(data, self._server_media)


# ---- turns on the wire ---------------------------------------------------------------------------------
