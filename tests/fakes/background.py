"""Run an ASGI app under uvicorn on 127.0.0.1 in a thread of its own.

A thread (not the test's event loop) so one fake serves sync tests, async tests, and production code
that blocks the loop by mistake alike; the fake keeps answering either way. Its state is read and
written from both threads, so fakes keep it in plain lists and counters (atomic under the GIL) and
signal with `threading.Event`.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Self

import uvicorn
from starlette.requests import Request

START_TIMEOUT_S = 20.0


class BackgroundAsgiServer:
    """Base for the HTTP fakes: `with Fake() as fake:` or `async with Fake() as fake:`."""

    def __init__(self) -> None:
        self.url = ""
        self.port = 0
        self.stopping = threading.Event()  # long-running handlers poll it so shutdown is prompt
        self.disconnects = 0
        self.disconnected = threading.Event()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def app(self) -> Any:
        raise NotImplementedError

    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            self.app(), log_level="warning", lifespan="off", http="h11", access_log=False,
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name=type(self).__name__, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"{type(self).__name__} did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self.stopping.set()
        if self._server is not None:
            self._server.should_exit = True
            self._server.force_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def record_disconnect(self) -> None:
        """Called by a streaming handler whose client went away before the body was complete."""
        self.disconnects += 1
        self.disconnected.set()

    async def watch(self, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """Pass a streaming body through, recording a disconnect if it is abandoned before the end."""
        complete = False
        try:
            async for chunk in body:
                yield chunk
            complete = True
        finally:
            if not complete and not self.stopping.is_set():
                self.record_disconnect()

    async def wait_disconnect(self, timeout: float = 10.0) -> bool:
        return await asyncio.to_thread(self.disconnected.wait, timeout)

    async def hang(self, request: Request | None = None) -> None:
        """Sleep until the fake stops or the client goes away.

        Inside a streaming body the handler is cancelled when the client disconnects (and `watch`
        records it). Before the response has started nothing notices a disconnect, so pass the
        request and this polls for it.
        """
        # Polled: the flag is set from the test's thread, which cannot set this loop's asyncio.Event.
        while not self.stopping.is_set():
            if request is not None and await request.is_disconnected():
                self.record_disconnect()
                return
            await asyncio.sleep(0.02)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)
