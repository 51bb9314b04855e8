"""RTP/RTCP port pairs from the configured range: even port for RTP, the next one for RTCP."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass


class RtpPortsExhausted(RuntimeError):
    """Every port pair in the range is taken; the message names the range to widen."""


@dataclass(slots=True)
class RtpSocketPair:
    """Bound, non-blocking UDP sockets for one call; give them back with `RtpPortAllocator.release`."""

    port: int
    rtp: socket.socket
    rtcp: socket.socket


def address_family(host: str) -> socket.AddressFamily:
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return socket.AF_INET  # a host name: IPv4 is what SIP peers overwhelmingly use


class RtpPortAllocator:
    """Hands out port pairs round-robin, binding them to prove they are free.

    Binding is the test: a port some other process holds fails to bind and is skipped. Round-robin,
    rather than lowest-free-first, keeps a just-released pair idle for as long as possible, so stray
    packets for a finished call do not land in the next one.
    """

    def __init__(self, min_port: int, max_port: int) -> None:
        first = min_port + (min_port % 2)
        if first + 1 > max_port:
            raise ValueError(f"RTP port range {min_port}-{max_port} holds no even/odd port pair")
        self.min_port = min_port
        self.max_port = max_port
        self._ports = list(range(first, max_port, 2))  # p and p + 1 both within the range
        self._cursor = 0
        self._in_use: set[int] = set()

    @property
    def capacity(self) -> int:
        return len(self._ports)

    @property
    def in_use(self) -> int:
        return len(self._in_use)

    def allocate(self, host: str) -> RtpSocketPair:
        family = address_family(host)
        for _ in range(len(self._ports)):
            port = self._ports[self._cursor]
            self._cursor = (self._cursor + 1) % len(self._ports)
            if port in self._in_use:
                continue
            pair = _bind_pair(family, host, port)
            if pair is not None:
                self._in_use.add(port)
                return pair
        raise RtpPortsExhausted(
            f"no free RTP port pair in {self.min_port}-{self.max_port} ({len(self._in_use)} of "
            f"{len(self._ports)} pairs held by calls here, the rest by other programs); "
            "widen [sip] rtp_port_min/rtp_port_max or take fewer calls"
        )

    def release(self, pair: RtpSocketPair) -> None:
        for sock in (pair.rtp, pair.rtcp):
            sock.close()
        self._in_use.discard(pair.port)


def _bind_pair(family: socket.AddressFamily, host: str, port: int) -> RtpSocketPair | None:
    socks: list[socket.socket] = []
    try:
        for candidate in (port, port + 1):
            sock = socket.socket(family, socket.SOCK_DGRAM)
            socks.append(sock)
            sock.setblocking(False)
            sock.bind((host, candidate))
    except OSError:
        for sock in socks:
            sock.close()
        return None
    return RtpSocketPair(port, socks[0], socks[1])
