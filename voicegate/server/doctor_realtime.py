"""The doctor's look at `[realtime]`: the endpoint reached (DNS, TCP, TLS), the WebSocket handshake with the key,
and one session.update answered with session.updated, each within realtime.connect_timeout_ms as a call would
have it; then what the Realtime agent does without (docs/realtime.md, "What works").

Nothing here is sent but a session.update with the model, voice, rates and turn-taking: no instructions, no
audio, so the probe costs no tokens. What it prints never holds the key, a URL's userinfo or its query.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import websockets
from websockets.asyncio.client import ClientConnection, connect

from voicegate.internal.config import Config
from voicegate.internal.config.providers import RealtimeConfig
from voicegate.internal.config.realtime_checks import REALTIME_WITHOUT, shown_url
from voicegate.internal.realtime.protocol import connect_headers, connect_url, session_update
from voicegate.server.doctor import Check

KEY_FIX = ("set the endpoint's key in realtime.api_key (VOICEGATE_REALTIME__API_KEY; \"\" uses [openai] api_key), "
           'sent as auth = "bearer" for OpenAI and Qwen, auth = "api-key" for an Azure key')


def check_realtime(config: Config) -> list[Check]:
    realtime = config.realtime
    if not realtime.enabled:
        return [Check("realtime", None, "the Realtime agent is off (realtime.enabled = false)")]
    return [*asyncio.run(probe_realtime(realtime, realtime.api_key or config.openai.api_key)),
            features_check()]


# ---- the probe -----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int
    tls: bool
    shown: str  # scheme://host/path, for messages


def endpoint_of(url: str) -> Endpoint:
    parts = urlsplit(url)
    tls = parts.scheme.lower() == "wss"
    return Endpoint(parts.hostname or "", parts.port or (443 if tls else 80), tls, shown_url(url))


async def probe_realtime(realtime: RealtimeConfig, key: str) -> list[Check]:
    """Three checks, each run only when the one before passed: endpoint, key, session."""
    endpoint = endpoint_of(realtime.url)
    timeout_s = realtime.connect_timeout_ms / 1000
    reach = await reach_check(endpoint, timeout_s)
    if reach.ok is False:
        return [reach, Check("realtime key", None, "not tried: the endpoint is not reachable"),
                Check("realtime session", None, "not tried: the endpoint is not reachable")]
    began = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            socket_ = await connect(connect_url(realtime), additional_headers=connect_headers(realtime, key),
                                    open_timeout=None, max_size=None)
    except websockets.InvalidStatus as exc:
        return [reach, handshake_refused(exc.response.status_code, endpoint),
                Check("realtime session", None, "not tried: the handshake was refused")]
    except (OSError, TimeoutError, websockets.WebSocketException) as exc:
        detail = (f"no WebSocket handshake within {realtime.connect_timeout_ms} ms (realtime.connect_timeout_ms)"
                  if isinstance(exc, TimeoutError) else f"the WebSocket handshake failed: {_reason(exc)}")
        return [reach, Check("realtime key", False, f"{endpoint.shown}: {detail}",
                             "check realtime.url's path (OpenAI: /v1/realtime; Azure: /openai/v1/realtime)"),
                Check("realtime session", None, "not tried: no WebSocket")]
    async with socket_:
        handshake_ms = (time.monotonic() - began) * 1000
        key_ok = Check("realtime key", True, f"the WebSocket handshake with the key was accepted ({realtime.auth}, "
                       f"{handshake_ms:.0f} ms)")
        left_s = max(timeout_s - (time.monotonic() - began), 0.001)
        return [reach, key_ok, await session_check(socket_, realtime, left_s)]


async def reach_check(endpoint: Endpoint, timeout_s: float) -> Check:
    """DNS, then TCP, then TLS: the first that fails is the one named."""
    name = "realtime endpoint"
    where = f"{endpoint.host}:{endpoint.port}"
    loop = asyncio.get_running_loop()
    began = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            infos = await loop.getaddrinfo(endpoint.host, endpoint.port, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError) as exc:
        return Check(name, False, f"cannot resolve {endpoint.host} ({_reason(exc)})",
                     "check realtime.url's host name and this machine's DNS")
    address = str(infos[0][4][0])
    context = ssl.create_default_context() if endpoint.tls else None
    try:
        async with asyncio.timeout(timeout_s):
            _reader, writer = await asyncio.open_connection(address, endpoint.port, ssl=context,
                                                            server_hostname=endpoint.host if context else None)
    except ssl.SSLError as exc:
        return Check(name, False, f"{where} ({address}): the TLS handshake failed: {_reason(exc)}",
                     "the endpoint's certificate must be valid for its host name (and this machine's CA store "
                     "current); a local endpoint without TLS takes ws://")
    except (OSError, TimeoutError) as exc:
        return Check(name, False, f"{where} ({address}): no TCP connection ({_reason(exc)})",
                     "check realtime.url's host and port, and that this machine may reach it (firewall, proxy)")
    tls = writer.get_extra_info("ssl_object")
    writer.close()
    try:
        await writer.wait_closed()
    except (OSError, ssl.SSLError):
        pass  # a peer that drops an idle connection at once: we had what we came for
    layers = f"TCP and TLS ({tls.version()})" if tls is not None else "TCP (no TLS: ws://)"
    return Check(name, True, f"{where} ({address}): {layers} in {(time.monotonic() - began) * 1000:.0f} ms")


def handshake_refused(status: int, endpoint: Endpoint) -> Check:
    name = "realtime key"
    if status in (401, 403):
        return Check(name, False, f"{endpoint.shown}: key refused (HTTP {status})", KEY_FIX)
    if status == 404:
        return Check(name, False, f"{endpoint.shown}: no Realtime endpoint or model there (HTTP 404)",
                     "check realtime.url and realtime.model (Azure: the deployment's name)")
    if status == 429:
        return Check(name, False, f"{endpoint.shown}: rate-limited or out of quota (HTTP 429)",
                     "check the account's quota and rate limits with the provider")
    return Check(name, False, f"{endpoint.shown}: the WebSocket handshake was answered HTTP {status}",
                 "check realtime.url, and the provider's status page")


async def session_check(socket_: ClientConnection, realtime: RealtimeConfig, timeout_s: float) -> Check:
    """Send the call's session.update; pass on session.updated, fail on an `error` event, a close or the time."""
    name = "realtime session"
    fix = ("check realtime.model, realtime.voice, realtime.dialect, the rates and realtime.transcription_model "
           "against the provider's documentation (docs/realtime.md)")
    began = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            # The call's own session.update (internal/realtime/protocol.py), less instructions and tools.
            await socket_.send(json.dumps(session_update(realtime, "", [])))
            async for message in socket_:
                event = _event(message)
                kind = event.get("type")
                if kind == "session.updated":
                    took = (time.monotonic() - began) * 1000
                    return Check(name, True, f"session.update answered with session.updated in {took:.0f} ms "
                                 f"(model {realtime.model}, voice {realtime.voice}, {realtime.dialect}, "
                                 f"{realtime.input_rate}/{realtime.output_rate} Hz)")
                if kind == "error":
                    error = event.get("error") or {}
                    message_text = str(error.get("message") or error.get("code") or error)[:300]
                    return Check(name, False, f"the endpoint refused the session: {message_text}", fix)
    except TimeoutError:
        return Check(name, False, f"no session.updated within {realtime.connect_timeout_ms} ms of connecting "
                     "(realtime.connect_timeout_ms): calls would get the apology",
                     "check realtime.dialect (an endpoint waits on a shape it does not know), or raise "
                     "realtime.connect_timeout_ms for a slow endpoint")
    except websockets.ConnectionClosed as exc:
        return Check(name, False, f"the endpoint closed the socket after session.update ({_reason(exc)})", fix)
    return Check(name, False, "the endpoint closed the socket after session.update", fix)


def _event(message: str | bytes) -> dict[str, Any]:
    try:
        event = json.loads(message)
    except ValueError:
        return {}
    return event if isinstance(event, dict) else {}


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# ---- what the Realtime agent does without --------------------------------------------------------------

def features_check() -> Check:
    """The features the Realtime agent does without, whatever the config; the ones this config turns on are
    also among the config warnings above (internal/config/checks.py)."""
    return Check("realtime features", None, "the Realtime agent does without: " + "; ".join(
        f"{feature}: {why}" for feature, why in REALTIME_WITHOUT) + ' (docs/realtime.md, "What works")')
