"""A TCP forwarder in front of a live server that a test can cut and restore, as a network outage would.

While cut, every connection through it is aborted and new ones are dropped as they arrive, so a
browser sees its WebSocket die and its reconnects fail, and the server sees the client vanish; the
server itself keeps running and stays reachable directly, which lets a test change things behind
the page's back.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType


class CuttableProxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.host = host
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._cut = False

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def cut(self) -> None:
        self._cut = True
        for writer in list(self._open):
            writer.transport.abort()

    def restore(self) -> None:
        self._cut = False

    async def __aenter__(self) -> CuttableProxy:
        self._server = await asyncio.start_server(self._forward, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _forward(self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        if self._cut:
            client.transport.abort()
            return
        try:
            upstream_reader, upstream = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            client.transport.abort()
            return
        pair = {client, upstream}
        self._open |= pair
        try:
            await asyncio.gather(_pipe(client_reader, upstream), _pipe(upstream_reader, client))
        finally:
            self._open -= pair
            for writer in pair:
                writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
