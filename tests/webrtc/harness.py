"""A real voicegate server on a free port and aiortc clients that call it over WHIP, for tests.

The server runs in the test's own event loop (uvicorn.Server.serve as a task), so tests can look at
the server's sessions directly while a real client talks to it over real sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Generator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.contrib.media import MediaPlayer
from aiortc.mediastreams import AudioStreamTrack, MediaStreamTrack
from fastapi import FastAPI

from tests.conftest import free_port
from voicegate.internal.config import Config, load_config
from voicegate.internal.evals.webrtc_phone import audio_frames, mono
from voicegate.internal.session import Session, SessionManager
from voicegate.server.app import create_gateway_application
from voicegate.server.gateway import Gateway
from voicegate.server.serve import HTTP_KEEP_ALIVE_S

EVENT_TIMEOUT_S = 60.0


def webrtc_config(tmp_path: Path, **server: Any) -> Config:
    config = load_config(None)
    config.server.host = "127.0.0.1"
    config.server.data_dir = str(tmp_path / "data")
    config.sip.enabled = False
    config.sip.bind = f"127.0.0.1:{free_port()}"
    config.webrtc.ice_hosts = ["127.0.0.1"]
    config.pipeline.sample_rate = 16000
    config.pipeline.debug = True
    config.pipeline.greeting = ""
    config.pipeline.idle_prompt_s = 0  # the idle prompt and the thinking cue only where a test asks for them
    config.pipeline.thinking_cue = "off"
    # These tests check the reply's words with pocketsphinx grammars made for espeak-ng's voice, and give
    # the server a pocketsphinx of their own; test_whisper_calls.py runs the offline defaults end to end.
    config.stt.provider = "pocketsphinx"
    config.tts.provider = "espeak"
    for key, value in server.items():
        setattr(config.server, key, value)
    return config


class _InLoopServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:  # the test runner owns the signals
        yield


class LiveServer:
    def __init__(self, app: FastAPI, port: int) -> None:
        self.app = app
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._server = _InLoopServer(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None,
                                                    access_log=False, lifespan="on",
                                                    timeout_keep_alive=HTTP_KEEP_ALIVE_S))
        self._task: asyncio.Task[None] | None = None

    @property
    def gateway(self) -> Gateway:
        gateway = self.app.state.gateway
        assert isinstance(gateway, Gateway)
        return gateway

    @property
    def sessions(self) -> SessionManager:
        assert self.gateway.sessions is not None
        return self.gateway.sessions

    def session_at(self, location: str) -> Session | None:
        return self.sessions.get(location.rsplit("/", 1)[-1])

    async def start(self) -> None:
        self._task = asyncio.create_task(self._server.serve())
        deadline = time.monotonic() + 60
        while not self._server.started:
            if self._task.done():
                await self._task
                raise RuntimeError("the server did not start")
            if time.monotonic() > deadline:
                raise TimeoutError("the server did not start")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        if self._task is None:
            return
        self._server.should_exit = True
        await asyncio.wait_for(self._task, 60)
        self._task = None

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=30)


@contextlib.asynccontextmanager
async def live_server(config: Config, **providers: Any) -> AsyncIterator[LiveServer]:
    port = free_port()
    config.server.port = port
    server = LiveServer(create_gateway_application(config, **providers), port)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


class WhipClient:
    """An aiortc caller: sends a WAV file (or silence), records what it hears, collects the events."""

    def __init__(self, wav: Path | None = None, *, data_channel: bool = True) -> None:
        self.pc = RTCPeerConnection()
        self._player = MediaPlayer(str(wav)) if wav is not None else None
        track: MediaStreamTrack = self._player.audio if self._player is not None else AudioStreamTrack()
        self.pc.addTrack(track)
        self.channel = self.pc.createDataChannel("events") if data_channel else None
        self.events: list[dict[str, Any]] = []
        self.arrivals: list[float] = []  # monotonic arrival time of each event
        self._event_added = asyncio.Event()
        self.heard: list[tuple[float, bytes]] = []  # (arrival time, 48 kHz mono PCM16) per frame
        self._tasks: list[asyncio.Task[None]] = []
        self.response: httpx.Response | None = None
        if self.channel is not None:
            self.channel.on("message", self._on_message)
        self.pc.on("track", self._on_track)

    def _on_message(self, message: str | bytes) -> None:
        self.arrivals.append(time.monotonic())
        self.events.append(json.loads(message))
        self._event_added.set()

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio":
            self._tasks.append(asyncio.create_task(self._record(track)))

    async def _record(self, track: MediaStreamTrack) -> None:
        async for frame in audio_frames(track):
            self.heard.append((time.monotonic(), mono(frame)))

    async def dial(self, http: httpx.AsyncClient, *, resume: str | None = None, token: str | None = None,
                   headers: dict[str, str] | None = None) -> httpx.Response:
        await self.pc.setLocalDescription(await self.pc.createOffer())
        all_headers = {"Content-Type": "application/sdp", **(headers or {})}
        if token:
            all_headers["Authorization"] = f"Bearer {token}"
        params = {"resume": resume} if resume else None
        response = await http.post("/whip", content=self.pc.localDescription.sdp, headers=all_headers,
                                   params=params)
        self.response = response
        if response.status_code == 201:
            await self.pc.setRemoteDescription(RTCSessionDescription(response.text, "answer"))
        return response

    @property
    def location(self) -> str:
        assert self.response is not None
        return str(self.response.headers["location"])

    @property
    def resume_token(self) -> str:
        assert self.response is not None
        return str(self.response.headers["x-resume-token"])

    async def hang_up(self, http: httpx.AsyncClient, headers: dict[str, str] | None = None) -> httpx.Response:
        """DELETE the session as the page does: with its resume token (an anonymous call's only proof)."""
        return await http.delete(self.location, headers={"X-Resume-Token": self.resume_token, **(headers or {})})

    def send(self, message: str | dict[str, Any]) -> None:
        assert self.channel is not None
        self.channel.send(message if isinstance(message, str) else json.dumps(message))

    def arrived_at(self, event: dict[str, Any]) -> float:
        return self.arrivals[next(i for i, e in enumerate(self.events) if e is event)]

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type") == kind]

    async def wait_said(self, fragment: str, timeout: float = EVENT_TIMEOUT_S) -> dict[str, Any]:
        """The agent's final transcript containing `fragment`: sent once that reply has played, when the
        turn is on record in the conversation."""
        return await self.wait_for(lambda e: e["type"] == "transcript" and e["role"] == "agent" and bool(e["final"])
                                   and fragment.lower() in str(e["text"]).lower(), timeout)

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool],
                       timeout: float = EVENT_TIMEOUT_S) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for event in self.events[seen:]:
                if predicate(event):
                    return event
            seen = len(self.events)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no matching event; got {self.events}")
            self._event_added.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event_added.wait(), remaining)

    async def wait_channel_open(self, timeout: float = EVENT_TIMEOUT_S) -> None:
        assert self.channel is not None
        deadline = time.monotonic() + timeout
        while self.channel.readyState != "open":
            if time.monotonic() > deadline:
                raise TimeoutError("the DataChannel did not open")
            await asyncio.sleep(0.02)

    def heard_since(self, since: float) -> bytes:
        return b"".join(pcm for at, pcm in self.heard if at >= since)

    async def close(self) -> None:
        """Drop the transport without DELETE, as a browser tab that vanished would."""
        await self.pc.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._player is not None and self._player.audio is not None:
            self._player.audio.stop()


async def wait_until(condition: Callable[[], bool], timeout: float = EVENT_TIMEOUT_S, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what or condition}")
        await asyncio.sleep(0.02)
