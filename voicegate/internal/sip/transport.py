"""UDP, TCP and TLS transports (RFC 3261 section 18, RFC 3581 rport, RFC 5626 keep-alives).

The transport turns bytes into messages and back, and shields everything above it from the network:
nothing raised by a peer's bytes or by the message handler escapes a protocol callback. Errors that
can still be answered are answered here, statelessly (400 with the reason, 513 for oversize), because
no transaction can exist for a message we could not parse.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from voicegate.internal.config.sections import SipConfig, split_host_port
from voicegate.internal.sip.capabilities import KNOWN_METHODS
from voicegate.internal.sip.framer import FramingError, KeepAlive, StreamFramer
from voicegate.internal.sip.message import (
    SipMessage,
    SipParseError,
    SipRequest,
    SipResponse,
    parse,
)
from voicegate.internal.sip.salvage import refusal, salvage_request
from voicegate.internal.sip.tls import client_context, default_port, server_context, tls_listen_address

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int
    transport: str = "udp"  # lower case: "udp", "tcp" or "tls"
    # TLS: the name the peer's certificate must carry (the URI's host), when we connect out.
    server_name: str = field(default="", compare=False)

    @property
    def reliable(self) -> bool:
        return self.transport != "udp"

    @property
    def key(self) -> tuple[str, int]:
        return (self.host.lower(), self.port)


MessageHandler = Callable[[SipMessage, Address], None]
ErrorHandler = Callable[[Exception], None]


class TransportLayer:
    """Listens on `sip.bind` for each of `sip.transports` and sends requests and responses."""

    def __init__(
        self,
        config: SipConfig,
        on_message: MessageHandler,
        *,
        bind: tuple[str, int] | None = None,
        tcp_idle_timeout_s: float = 600.0,
        connect_timeout_s: float = 5.0,
        allow: tuple[str, ...] = (),
    ) -> None:
        """`bind` overrides `config.bind` (the config refuses port 0, which tests need); `allow` is
        the Allow of our stateless 501 to a malformed request with an unknown method."""
        self._config = config
        self._bind = bind or (config.bind_host, config.bind_port)
        self._on_message = on_message
        self._max = config.max_message_bytes
        self._idle_timeout = tcp_idle_timeout_s
        self._connect_timeout = connect_timeout_s
        self._udp: asyncio.DatagramTransport | None = None
        self._server: asyncio.Server | None = None
        self._tls_server: asyncio.Server | None = None
        self._tls_client: ssl.SSLContext | None = None
        self._connections: dict[tuple[str, int], _TcpConnection] = {}
        self._connecting: dict[tuple[str, int], asyncio.Task[_TcpConnection]] = {}
        self._ports: dict[str, tuple[str, int]] = {}
        self._allow = allow
        self._reaper: asyncio.Task[None] | None = None
        self._accepted: dict[str, int] = {}  # accepted TCP/TLS connections open, by source host
        self.refused_connections = 0
        # Told why ("total" or "per_source") each time an accepted connection is refused (a metric).
        self.on_connection_refused: Callable[[str], None] | None = None

    # ---- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        host, port = self._bind
        for attempt in range(5):
            try:
                if "udp" in self._config.transports:
                    udp, _ = await loop.create_datagram_endpoint(lambda: _UdpProtocol(self), local_addr=(host, port))
                    self._udp = udp
                    self._ports["udp"] = udp.get_extra_info("sockname")[:2]
                if "tcp" in self._config.transports:
                    # Same port as UDP, so one sent-by works for both (port 0 picks it once, for UDP).
                    tcp_port = self._ports["udp"][1] if "udp" in self._ports else port
                    self._server = await loop.create_server(
                        lambda: _TcpConnection(self, None), host, tcp_port, reuse_address=True
                    )
                    self._ports["tcp"] = self._server.sockets[0].getsockname()[:2]
                if "tls" in self._config.transports:
                    tls_host, tls_port = tls_listen_address(self._config, (host, port))
                    self._tls_client = client_context(self._config)
                    self._tls_server = await loop.create_server(
                        lambda: _TcpConnection(self, None, "tls"), tls_host, tls_port, reuse_address=True,
                        ssl=server_context(self._config), ssl_handshake_timeout=self._connect_timeout,
                    )
                    self._ports["tls"] = self._tls_server.sockets[0].getsockname()[:2]
                break
            except OSError:
                await self._close_listeners()
                if port != 0 or attempt == 4:
                    raise
        self._reaper = asyncio.create_task(self._reap_idle())
        log.info("sip listening", extra={"sip_listen": {k: f"{h}:{p}" for k, (h, p) in self._ports.items()}})

    async def stop(self) -> None:
        if self._reaper:
            self._reaper.cancel()
        for task in list(self._connecting.values()):
            task.cancel()
        for connection in list(self._connections.values()):
            connection.close()
        await self._close_listeners()

    async def _close_listeners(self) -> None:
        if self._udp:
            self._udp.close()
            self._udp = None
        for server in (self._server, self._tls_server):
            if server:
                server.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(server.wait_closed(), 2)
        self._server = self._tls_server = None
        self._ports.clear()

    # ---- addresses -------------------------------------------------------------------------------

    def local_address(self, transport: str = "udp") -> Address:
        host, port = self._ports[transport]
        return Address(host, port, transport)

    @property
    def transports(self) -> list[str]:
        return list(self._ports)

    def advertised(self, transport: str, remote_host: str) -> tuple[str, int]:
        """The host:port a peer should use to reach us (Via sent-by, Contact)."""
        port = self._ports[transport][1]
        if self._config.public_address:
            public_host, public_port = split_host_port(self._config.public_address, port)
            # A port in public_address is the UDP/TCP one; TLS keeps its own (5061 by default).
            return public_host, port if transport == "tls" else public_port
        host = self._ports[transport][0]
        if ipaddress.ip_address(host).is_unspecified:
            host = _route_source(remote_host)
        return host, port

    def has_connection(self, address: Address) -> bool:
        connection = self._connections.get(address.key)
        return connection is not None and not connection.closing

    # ---- sending ---------------------------------------------------------------------------------

    def send_request(self, request: SipRequest, dest: Address, on_error: ErrorHandler | None = None) -> None:
        self._send(request.serialise(), dest, on_error)

    def send_response(self, response: SipResponse, source: Address) -> None:
        """RFC 3261 18.2.2 + RFC 3581: back over the request's connection, or to received:rport."""
        data = response.serialise()
        if source.reliable and self.has_connection(source):
            self._send(data, source, None)
            return
        try:
            via = response.top_via
        except Exception:
            return
        host = via.received or via.host
        port = via.rport if via.has_rport and via.rport else via.port or default_port(source.transport)
        self._send(data, Address(host, port, source.transport), None)

    def _send(self, data: bytes, dest: Address, on_error: ErrorHandler | None) -> None:
        try:
            if not dest.reliable:
                if self._udp is None:
                    raise OSError("UDP is not enabled")
                self._udp.sendto(data, (dest.host, dest.port))
                return
            connection = self._connections.get(dest.key)
            if connection is not None and not connection.closing:
                connection.write(data)
                return
            if dest.transport not in self._ports:
                raise OSError(f"{dest.transport.upper()} is not enabled")
            asyncio.get_running_loop().create_task(self._send_after_connect(data, dest, on_error))
        except Exception as exc:
            log.warning("sip send failed", extra={"sip_error": repr(exc), "sip_dest": f"{dest.host}:{dest.port}"})
            if on_error:
                on_error(exc)

    async def _send_after_connect(self, data: bytes, dest: Address, on_error: ErrorHandler | None) -> None:
        try:
            task = self._connecting.get(dest.key)
            if task is None:
                task = asyncio.get_running_loop().create_task(self._connect(dest))
                self._connecting[dest.key] = task
                task.add_done_callback(lambda _: self._connecting.pop(dest.key, None))
            connection = await asyncio.shield(task)
            connection.write(data)
        except Exception as exc:
            log.warning("sip connect failed", extra={"sip_error": repr(exc), "sip_dest": f"{dest.host}:{dest.port}"})
            if on_error:
                on_error(exc)

    async def _connect(self, dest: Address) -> _TcpConnection:
        loop = asyncio.get_running_loop()
        if dest.transport != "tls":
            connect = loop.create_connection(lambda: _TcpConnection(self, dest), dest.host, dest.port)
        else:
            # The certificate must name the URI's host (RFC 5922 7.1), not merely chain to our CA.
            connect = loop.create_connection(
                lambda: _TcpConnection(self, dest, "tls"), dest.host, dest.port, ssl=self._tls_client,
                server_hostname=dest.server_name or dest.host, ssl_handshake_timeout=self._connect_timeout,
            )
        _, protocol = await asyncio.wait_for(connect, self._connect_timeout)
        return protocol

    # ---- receiving -------------------------------------------------------------------------------

    def _receive(self, data: bytes, source: Address, reply: Callable[[bytes], None]) -> None:
        """One datagram or framed stream message; never raises."""
        try:
            if not data.strip(b"\r\n"):
                return  # UDP keep-alive (RFC 5626 uses STUN here; bare CRLFs are common too)
            if len(data) > self._max:
                self._reject(data, 513, "Message Too Large", reply)
                return
            try:
                message = parse(data)
            except SipParseError as exc:
                log.info("sip malformed message", extra={"sip_error": exc.reason, "sip_source": source.host})
                self._reject(data, 400, f"Bad Request ({exc.reason})", reply)
                return
            if isinstance(message, SipRequest):
                _stamp_via(message, source)
            self._on_message(message, source)
        except Exception:
            log.exception("sip message handling failed")

    def _reject(self, data: bytes, status: int, reason: str, reply: Callable[[bytes], None]) -> None:
        request = salvage_request(data)
        if request is None or request.method == "ACK":
            return  # nothing to address a response with (and ACK is never answered)
        extra: list[tuple[str, str]] = []
        if status == 400 and request.method not in KNOWN_METHODS:
            # RFC 4475 3.1.2.18: a method we would refuse anyway is better answered 501 than 400.
            status, reason = 501, "Not Implemented"
            extra = [("Allow", ", ".join(self._allow))] if self._allow else []
        reply(refusal(request, status, reason, extra).serialise())

    def _udp_received(self, data: bytes, addr: tuple[str, int]) -> None:
        source = Address(addr[0], addr[1], "udp")

        def reply(payload: bytes) -> None:
            self._send(payload, source, None)

        self._receive(data, source, reply)

    def _admit(self, host: str) -> bool:
        """An accepted connection from `host` may stay: within sip.max_connections in all and
        sip.max_connections_per_source from one address; else it is closed at once and counted, so a
        flood of idle connections cannot exhaust descriptors or memory."""
        reason = ("total" if sum(self._accepted.values()) >= self._config.max_connections
                  else "per_source" if self._accepted.get(host, 0) >= self._config.max_connections_per_source
                  else None)
        if reason is None:
            self._accepted[host] = self._accepted.get(host, 0) + 1
            return True
        self.refused_connections += 1
        if self.refused_connections & (self.refused_connections - 1) == 0:  # the 1st, 2nd, 4th, 8th...
            log.warning("sip connection refused: too many open", extra={"sip_source": host, "sip_reason": reason,
                                                                        "refused": self.refused_connections})
        if self.on_connection_refused is not None:
            self.on_connection_refused(reason)
        return False

    def _release(self, host: str) -> None:
        left = self._accepted.get(host, 0) - 1
        if left > 0:
            self._accepted[host] = left
        else:
            self._accepted.pop(host, None)

    def _register(self, connection: _TcpConnection) -> None:
        if connection.peer is not None:
            old = self._connections.get(connection.peer.key)
            if old is not None and old is not connection:
                old.close()
            self._connections[connection.peer.key] = connection

    def _forget(self, connection: _TcpConnection) -> None:
        if connection.peer is not None and self._connections.get(connection.peer.key) is connection:
            del self._connections[connection.peer.key]

    async def _reap_idle(self) -> None:
        interval = max(1.0, min(30.0, self._idle_timeout / 4))
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for connection in list(self._connections.values()):
                if now - connection.last_activity > self._idle_timeout:
                    connection.close()


def _stamp_via(request: SipRequest, source: Address) -> None:
    """RFC 3261 18.2.1 received, RFC 3581 rport: remember where the request really came from."""
    via = request.top_via
    # A received the client put on its own Via says nothing true: the source address replaces it.
    if via.host != source.host or via.has_rport or "received" in via.params:
        via.params["received"] = source.host
    if via.has_rport:
        via.params["rport"] = str(source.port)
    request.set_top_via(via)


def _route_source(remote_host: str) -> str:
    """Our address on the route to `remote_host` (a UDP connect sends nothing)."""
    try:
        family = socket.AF_INET6 if ":" in remote_host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((remote_host, 9))
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"


class _UdpProtocol(asyncio.DatagramProtocol):
    def __init__(self, layer: TransportLayer) -> None:
        self._layer = layer

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        self._layer._udp_received(data, (str(addr[0]), int(addr[1])))

    def error_received(self, exc: Exception) -> None:
        log.debug("sip udp error", extra={"sip_error": repr(exc)})


class _TcpConnection(asyncio.Protocol):
    """One TCP (or TLS) connection, accepted or opened by us; the key is the peer's address."""

    def __init__(self, layer: TransportLayer, peer: Address | None, transport: str = "tcp") -> None:
        self._layer = layer
        self.peer = peer
        self._kind = transport
        self._framer = StreamFramer(layer._max)
        self._transport: asyncio.Transport | None = None
        self._accepted_from: str | None = None  # counted against the caps while open
        self.last_activity = time.monotonic()

    @property
    def closing(self) -> bool:
        return self._transport is None or self._transport.is_closing()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        if self.peer is None:  # accepted, not opened by us: within the caps or closed at once
            host, port = transport.get_extra_info("peername")[:2]
            if not self._layer._admit(str(host)):
                self._transport.abort()
                self._transport = None
                return
            self._accepted_from = str(host)
            self.peer = Address(str(host), int(port), self._kind)
        self._layer._register(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._accepted_from is not None:
            self._layer._release(self._accepted_from)
            self._accepted_from = None
        self._layer._forget(self)
        self._transport = None

    def write(self, data: bytes) -> None:
        if self._transport is None or self._transport.is_closing():
            raise ConnectionError("connection closed")
        self.last_activity = time.monotonic()
        self._transport.write(data)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        self.last_activity = time.monotonic()
        assert self.peer is not None
        try:
            items = self._framer.feed(data)
        except FramingError as exc:
            self._framing_failed(exc)
            return
        except Exception:
            log.exception("sip framing failed")
            self.close()
            return
        for item in items:
            if isinstance(item, KeepAlive):
                with contextlib.suppress(Exception):
                    self.write(b"\r\n")
            else:
                self._layer._receive(item, self.peer, self._reply)

    def _reply(self, data: bytes) -> None:
        with contextlib.suppress(Exception):
            self.write(data)

    def _framing_failed(self, exc: FramingError) -> None:
        # The stream position is lost, so the connection cannot continue: answer if we can, then close.
        log.info("sip stream refused", extra={"sip_error": exc.reason})
        if exc.head:
            status, reason = (513, "Message Too Large") if exc.too_large else (400, f"Bad Request ({exc.reason})")
            self._layer._reject(exc.head + b"\r\n\r\n", status, reason, self._reply)
        self.close()
