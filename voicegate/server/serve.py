"""Run the server in one asyncio process until SIGINT/SIGTERM, then shut down cleanly (exit 0).

SIGTERM (what an orchestrator sends) drains first (server/drain.py): no new calls, the live ones finish
or reach server.drain_timeout_s, then the shutdown. SIGINT (Ctrl-C at a terminal), or a second signal
during a drain, shuts down now; the calls still up get our BYE either way. A third signal stops at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Generator
from pathlib import Path

import uvicorn

from voicegate.internal.config import Config
from voicegate.server.app import create_gateway_application
from voicegate.server.banner import gather_banner_info, render_banner
from voicegate.server.drain import drain
from voicegate.server.version import package_version, source_revision

log = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    """uvicorn re-raises the signal after shutdown (exit by signal); we own the signals instead."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


# Idle HTTP connections are kept this long. uvicorn's 5 s default races clients that reuse a pooled
# connection a moment after the server closed it (httpx and browsers keep them far longer): the request
# then fails with a read error. 75 s outlasts the usual client pools' 60 s.
HTTP_KEEP_ALIVE_S = 75


async def serve(config: Config, config_path: Path | None = None) -> int:
    app = create_gateway_application(config)
    server = _Server(
        uvicorn.Config(
            app,
            host=config.server.host,
            port=config.server.port,
            log_config=None,
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=int(config.server.shutdown_timeout_s),
            timeout_keep_alive=HTTP_KEEP_ALIVE_S,
        )
    )
    loop = asyncio.get_running_loop()
    gateway = app.state.gateway
    draining: list[asyncio.Task[None]] = []

    async def drain_then_exit() -> None:
        await drain(gateway, config.server.drain_timeout_s)
        server.should_exit = True

    def request_exit(signum: int) -> None:
        if signum == signal.SIGTERM and server.started and not draining and not server.should_exit:
            log.info("draining", extra={"signal": "SIGTERM"})
            draining.append(asyncio.create_task(drain_then_exit()))
            return
        log.info("shutting down", extra={"signal": signal.Signals(signum).name})
        for task in draining:
            task.cancel()
        if server.should_exit:
            server.force_exit = True
        server.should_exit = True

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, request_exit, signum)

    async def run() -> None:
        try:
            await server.serve()
        except SystemExit:  # uvicorn exits this way when it cannot bind; it has logged why
            pass

    task = asyncio.create_task(run())
    # uvicorn offers no startup callback; poll its flag so the banner follows a successful bind.
    while not server.started and not task.done():  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    if server.started:
        await announce(config, app.state.gateway, _bound_port(server, config.server.port), config_path)
    await task
    if not server.started:
        log.error("the server did not start (see the errors above)")
        return 1
    return 0


def _bound_port(server: uvicorn.Server, configured: int) -> int:
    """The port uvicorn really listens on (server.port may be 0: the OS picks one)."""
    for listener in getattr(server, "servers", []):
        for sock in listener.sockets:
            return int(sock.getsockname()[1])
    return configured


async def announce(config: Config, gateway: object, http_port: int, config_path: Path | None) -> None:
    """Print the banner once, for the person who started the server, and log one record for machines.

    A terminal on stdout gets the banner there, beside the console log lines. Otherwise stdout may be a
    stream of JSON lines a collector parses, so the banner goes to stderr as plain lines and stdout gets
    only the structured "ready" record (page_url, sip_uris, memory_store, engines) in the log format in use.
    """
    info = await gather_banner_info(config, gateway, http_port, config_path)
    out = sys.stdout if sys.stdout.isatty() else sys.stderr
    print(render_banner(info), end="", file=out, flush=True)
    # memory_store, not memory: `memory` is a content field the log formatter drops (CONTENT_FIELDS).
    log.info("voicegate is ready", extra={"page_url": info.page_urls[0], "sip_uris": info.sip_uris,
                                          "memory_store": info.memory, "engines": info.engines,
                                          "version": package_version(), "revision": source_revision()})
