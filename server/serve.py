"""Run the server in one asyncio process until SIGINT/SIGTERM, then shut down cleanly (exit 0)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Generator

import uvicorn

from internal.config import Config
from server.app import create_gateway_application
from server.providers import effective_tts_provider

log = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    """uvicorn re-raises the signal after shutdown (exit by signal); we own the signals instead."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def reachable_address(bind_host: str) -> str:
    """The address a person on this network would dial: the bind host, or this machine's own."""
    if bind_host not in ("0.0.0.0", "::", ""):
        return bind_host
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("10.255.255.255", 1))  # no packet is sent; this only picks the outbound interface
        return str(probe.getsockname()[0])
    return "127.0.0.1"


def banner(config: Config) -> list[str]:
    http_host = "localhost" if config.server.host in ("0.0.0.0", "::", "127.0.0.1") else config.server.host
    lines = [f"voicegate: browser page at http://{http_host}:{config.server.port}/"]
    if config.sip.enabled:
        sip_host = config.sip.public_address or reachable_address(config.sip.bind_host)
        transports = ", ".join(config.sip.transports)
        lines.append(f"voicegate: SIP at sip:voicegate@{sip_host}:{config.sip.bind_port} ({transports})")
    memory = "on" if config.memory.enabled else "off"
    lines.append(f"voicegate: memory {memory}; LLM {config.effective_llm_provider}; "
                 f"STT {config.stt.provider}; TTS {effective_tts_provider(config)}. Ctrl-C stops.")
    return lines


# Idle HTTP connections are kept this long. uvicorn's 5 s default races clients that reuse a pooled
# connection a moment after the server closed it (httpx and browsers keep them far longer): the request
# then fails with a read error. 75 s outlasts the usual client pools' 60 s.
HTTP_KEEP_ALIVE_S = 75


async def serve(config: Config) -> int:
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

    def request_exit(signum: int) -> None:
        log.info("shutting down", extra={"signal": signal.Signals(signum).name})
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
        for line in banner(config):
            print(line, file=sys.stderr, flush=True)
            log.info(line)
    await task
    if not server.started:
        log.error("the server did not start (see the errors above)")
        return 1
    return 0
