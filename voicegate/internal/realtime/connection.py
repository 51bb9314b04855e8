"""The WebSocket to a Realtime model: connect (with a deadline and the provider's headers), send in order,
read normalised events, close.

`send` never waits: the media path calls it every 20 ms, so events go to a queue that one writer task
drains in order (an append is never overtaken by the commit after it). Nothing is batched or dropped: each
event is one message as soon as the socket takes it. A handshake the server refuses (a wrong key, rate
limits, an outage) becomes a `RealtimeError` naming the HTTP status, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from voicegate.internal.config.providers import RealtimeConfig
from voicegate.internal.realtime.protocol import Event, connect_headers, connect_url, parse

log = logging.getLogger(__name__)

# One model event can carry seconds of base64 audio; the library's 1 MiB default is too tight for that.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
CLOSE_TIMEOUT_S = 2.0


class RealtimeError(Exception):
    """The model cannot be used for this call: `reason` is safe to log (never the caller's words)."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


def refusal_reason(status: int) -> str:
    """A refused handshake in words, for the log: what the deployer should look at."""
    if status in (401, 403):
        return f"the model refused the key (HTTP {status}): check [realtime] api_key / auth"
    if status == 404:
        return f"no Realtime endpoint there (HTTP {status}): check [realtime] url / model"
    if status == 429:
        return f"rate limited by the model (HTTP {status})"
    if status >= 500:
        return f"the model's server failed (HTTP {status})"
    return f"the model refused the connection (HTTP {status})"


class RealtimeConnection:
    def __init__(self, socket: ClientConnection) -> None:
        self._socket = socket
        self._queue: deque[tuple[str, float]] = deque()
        self._wake = asyncio.Event()
        self._closing = False
        # Told the stamp given with an event once the socket has taken it (the pipeline's latency samples).
        self.on_sent: Callable[[float], None] = lambda stamp: None
        self._writer = asyncio.create_task(self._write(), name="realtime-writer")

    @classmethod
    async def open(cls, config: RealtimeConfig, api_key: str) -> RealtimeConnection:
        """Connect within `connect_timeout_ms`; RealtimeError when that fails, for whatever reason."""
        url = connect_url(config)
        try:
            async with asyncio.timeout(config.connect_timeout_ms / 1000.0):
                socket = await connect(url, additional_headers=connect_headers(config, api_key),
                                       max_size=MAX_MESSAGE_BYTES, open_timeout=None, ping_interval=20,
                                       close_timeout=CLOSE_TIMEOUT_S, compression=None)
        except InvalidStatus as exc:
            status = exc.response.status_code
            raise RealtimeError(refusal_reason(status), status) from None
        except TimeoutError:
            raise RealtimeError(f"the model did not answer within {config.connect_timeout_ms} ms") from None
        except InvalidURI:
            raise RealtimeError("[realtime] url is not a WebSocket URL") from None
        except (OSError, InvalidHandshake) as exc:
            raise RealtimeError(f"could not connect to the model: {type(exc).__name__}") from None
        return cls(socket)

    @property
    def closed(self) -> bool:
        return self._closing or self._writer.done()

    def send(self, event: Event, stamp: float = 0.0) -> None:
        """Queue one event; `stamp` (non-zero) comes back through `on_sent` once it is on the socket."""
        if self._closing:
            return
        self._queue.append((json.dumps(event, separators=(",", ":")), stamp))
        self._wake.set()

    async def _write(self) -> None:
        queue = self._queue
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while queue:
                    text, stamp = queue.popleft()
                    await self._socket.send(text)
                    if stamp:
                        self.on_sent(stamp)
        except ConnectionClosed:
            queue.clear()  # the reader sees the close and says why

    async def events(self) -> AsyncIterator[Event]:
        """Server events, normalised, until the socket closes (however it closes: the caller knows whether
        it asked for that)."""
        try:
            async for message in self._socket:
                event = parse(message)
                if event is not None:
                    yield event
        except ConnectionClosed:
            return

    async def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._writer.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._writer
        with contextlib.suppress(Exception):
            await self._socket.close()
