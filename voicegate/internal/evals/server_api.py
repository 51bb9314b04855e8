"""What the eval asks the running server over HTTP: caller tokens, callers' memory, its call events.

Everything here needs the server's API key except what a caller may ask itself (GET /api/memory with
its own token). The call events (/api/admin/calls/events, server.call_events) are how a SIP call's
server-side facts reach the eval: what the agent heard and said, which tools it called with which
arguments, how the call ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import websockets
from websockets.asyncio.client import ClientConnection

HTTP_TIMEOUT_S = 30.0


class ServerApiError(Exception):
    """The server refused or could not answer; the message says what to change."""


@dataclass(frozen=True)
class Observed:
    at: float  # monotonic time it reached the eval
    event: dict[str, Any]


class ServerApi:
    def __init__(self, base_url: str, api_key: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.http = httpx.AsyncClient(base_url=self.base_url, timeout=HTTP_TIMEOUT_S)

    async def aclose(self) -> None:
        await self.http.aclose()

    def _keyed(self) -> dict[str, str]:
        if not self.api_key:
            raise ServerApiError("this needs the server's API key (--api-key, or server.api_key in the config)")
        return {"X-API-Key": self.api_key}

    async def token(self, subject: str) -> str:
        """A caller token for `subject`, minted by the server (POST /token)."""
        response = await self.http.post("/token", json={"resource_id": subject}, headers=self._keyed())
        if response.status_code != 200:
            raise ServerApiError(f"POST /token for {subject!r}: {_problem(response)}")
        return str(response.json()["token"])

    async def memory(self, owner: str, token: str = "") -> str:
        """Everything stored about `owner` (`sip:+1555...`, `jwt:alice`) as one text: the caller's own
        view for a token holder, the operator's for a phone number."""
        if token:
            response = await self.http.get("/api/memory", headers={"Authorization": f"Bearer {token}"})
            what = "GET /api/memory"
        else:
            response = await self.http.get(f"/api/admin/memory/{quote(owner, safe=':+')}", headers=self._keyed())
            what = f"GET /api/admin/memory/{owner}"
        if response.status_code != 200:
            raise ServerApiError(f"{what}: {_problem(response)}")
        documents = response.json().get("documents", {})
        return "\n".join(str(documents.get(scope, {}).get("content", "")) for scope in ("user", "memory")).strip()

    async def erase(self, owner: str) -> None:
        """Forget `owner` before a scenario starts; a server with memory off has nothing to forget."""
        response = await self.http.delete(f"/api/admin/memory/{quote(owner, safe=':+')}", headers=self._keyed())
        if response.status_code == 404 and _code(response) == "memory_disabled":
            return
        if response.status_code != 200:
            raise ServerApiError(f"DELETE /api/admin/memory/{owner}: {_problem(response)}")

    async def pending_writes(self) -> int:
        """Hang-up memory writes not landed yet (GET /health)."""
        with contextlib.suppress(httpx.HTTPError, ValueError):
            report = (await self.http.get("/health")).json()
            return int(report.get("components", {}).get("memory", {}).get("pending_writes", 0))
        return 0

    async def agent(self) -> dict[str, Any]:
        response = await self.http.get("/api/agent")
        if response.status_code != 200:
            raise ServerApiError(f"GET /api/agent: {_problem(response)}")
        return dict(response.json())


class CallEvents:
    """Every call's events from /api/admin/calls/events, kept by session, with their arrival times."""

    def __init__(self, base_url: str, api_key: str) -> None:
        self.url = base_url.rstrip("/").replace("http", "ws", 1) + "/api/admin/calls/events"
        self.api_key = api_key
        self.problem = ""  # why there are no events (off, no key, ...): "" while they flow
        self.dropped = 0
        self._by_session: dict[str, list[Observed]] = {}
        self._sip_sessions: dict[str, str] = {}
        self._socket: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if not self.api_key:
            self.problem = "no API key to read the server's call events with (--api-key)"
            return
        try:
            self._socket = await websockets.connect(self.url, additional_headers={"X-API-Key": self.api_key},
                                                    max_size=2**22)
        except (OSError, websockets.WebSocketException) as exc:
            self.problem = f"cannot open {self.url}: {exc}"
            return
        # A refusal arrives as a close right after the handshake; give it a moment to say so.
        with contextlib.suppress(TimeoutError, websockets.ConnectionClosed):
            self._take(await asyncio.wait_for(self._socket.recv(), 0.5))
        if self._socket.close_code is not None:
            self.problem = f"the server's call events are unavailable: {self._socket.close_reason or 'refused'}"
            return
        self._reader = asyncio.create_task(self._read(), name="eval-call-events")

    @property
    def flowing(self) -> bool:
        return not self.problem and self._socket is not None

    async def _read(self) -> None:
        assert self._socket is not None
        try:
            async for message in self._socket:
                self._take(message)
        except websockets.WebSocketException as exc:
            self.problem = f"the call events stopped: {exc}"
        else:
            self.problem = self.problem or "the server closed its call events"

    def _take(self, message: str | bytes) -> None:
        try:
            event = json.loads(message)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        if event.get("type") == "feed.dropped":
            self.dropped += int(event.get("count", 0))
            return
        session = str(event.get("session_id", ""))
        if event.get("type") == "call.started" and event.get("sip_call_id"):
            self._sip_sessions[str(event["sip_call_id"])] = session
        self._by_session.setdefault(session, []).append(Observed(time.monotonic(), event))

    def session_of_sip_call(self, call_id: str) -> str:
        return self._sip_sessions.get(call_id, "")

    def of_session(self, session_id: str) -> list[Observed]:
        return list(self._by_session.get(session_id, [])) if session_id else []

    async def close(self) -> None:
        if self._socket is not None:
            await self._socket.close()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)


def _code(response: httpx.Response) -> str:
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        return str(response.json()["error"]["code"])
    return ""


def _problem(response: httpx.Response) -> str:
    with contextlib.suppress(ValueError, AttributeError, TypeError, KeyError):
        error = response.json()["error"]
        return f"{response.status_code} {error['code']}: {error['message']}"
    return f"{response.status_code} {response.text[:200]}"
