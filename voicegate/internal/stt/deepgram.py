"""Streaming speech-to-text over Deepgram's live WebSocket API.

A continuous provider: every 20 ms frame of the call goes up one WebSocket, interim and final results
come back on it. Deepgram does its own endpointing, so the pipeline's `end_of_speech()` only asks it
to finalise early (`Finalize`). Results are mapped one to one: `final` is Deepgram's `is_final` (the
words will not change), and merging finals into turns is the pipeline's job.

The socket is owned by a background task per call: `push()` never blocks the media path. If the
socket is slower than the audio, the oldest queued frames are dropped (and counted) rather than
letting latency grow without bound; a dropped socket is reconnected once per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import websockets
from websockets.asyncio.client import ClientConnection, connect

from voicegate.internal.config.providers import DeepgramConfig
from voicegate.internal.stt.base import SttError, SttStream, Transcript

log = logging.getLogger(__name__)

# Deepgram closes a socket that carries no audio for 10 s; a KeepAlive in a quiet spell prevents it.
KEEPALIVE_S = 5.0
# 5 s of 20 ms frames: beyond that the transcript would lag the caller too far to be useful anyway.
MAX_QUEUED_FRAMES = 250
RECONNECTS_PER_CALL = 1
CONNECT_TIMEOUT_S = 10.0
# On close, how long Deepgram gets to send the last finals and close its side.
CLOSE_TIMEOUT_S = 3.0

KEEPALIVE = json.dumps({"type": "KeepAlive"})
FINALIZE = json.dumps({"type": "Finalize"})
CLOSE_STREAM = json.dumps({"type": "CloseStream"})


def listen_url(config: DeepgramConfig, sample_rate: int) -> str:
    """The live-transcription URL with the stream's parameters in the query string."""
    params: list[tuple[str, str | int]] = [
        ("model", config.model),
        ("encoding", "linear16"),
        ("sample_rate", sample_rate),
        ("channels", 1),
        ("interim_results", "true"),
        ("punctuate", "true"),
        ("endpointing", config.endpointing_ms),
        ("utterance_end_ms", config.utterance_end_ms),
        ("vad_events", "true"),
    ]
    if config.language:
        params.append(("language", config.language))
    params += [("keyterm", term) for term in config.keyterms]
    separator = "&" if "?" in config.url else "?"
    return config.url + separator + urlencode(params)


def parse_result(message: dict[str, Any]) -> Transcript | None:
    """A `Results` message as a Transcript; None for an empty interim (silence) or anything else.

    An empty final is kept when it answers a `Finalize`, so the pipeline waiting on end_of_speech
    learns that nothing was said.
    """
    if message.get("type") != "Results":
        return None
    alternatives = (message.get("channel") or {}).get("alternatives") or [{}]
    best = alternatives[0] if isinstance(alternatives[0], dict) else {}
    text = str(best.get("transcript") or "").strip()
    final = bool(message.get("is_final"))
    if not text and not (final and message.get("from_finalize")):
        return None
    confidence = best.get("confidence")
    return Transcript(text=text, final=final, confidence=float(confidence) if text and confidence is not None else None)


class DeepgramSpeechToText:
    name = "deepgram"

    def __init__(
        self, config: DeepgramConfig, *, keepalive_s: float = KEEPALIVE_S, max_queued_frames: int = MAX_QUEUED_FRAMES
    ) -> None:
        self._config = config
        self._keepalive_s = keepalive_s
        self._max_queued_frames = max_queued_frames

    def open(self, sample_rate: int) -> SttStream:
        return DeepgramSttStream(
            listen_url(self._config, sample_rate),
            {"Authorization": f"Token {self._config.api_key}"},
            keepalive_s=self._keepalive_s,
            max_queued_frames=self._max_queued_frames,
        )

    async def aclose(self) -> None:
        """Nothing shared: each call's socket belongs to its stream."""


class DeepgramSttStream:
    continuous = True

    def __init__(self, url: str, headers: dict[str, str], *, keepalive_s: float, max_queued_frames: int) -> None:
        self._url = url
        self._headers = headers
        self._keepalive_s = keepalive_s
        self._max_frames = max_queued_frames
        # Audio and control messages share one queue so a Finalize follows the audio pushed before it.
        self._outbox: deque[bytes | str] = deque()
        self._queued_frames = 0
        self._wake = asyncio.Event()
        self._results: asyncio.Queue[Transcript | None] = asyncio.Queue()
        self._closing = False
        self._failure = ""
        self.dropped_frames = 0
        self.reconnects = 0
        self._runner = asyncio.get_running_loop().create_task(self._run(), name="deepgram-stream")

    def push(self, pcm: bytes) -> None:
        if self._closing or self._runner.done():
            return
        if self._queued_frames >= self._max_frames:
            self._drop_oldest_frame()
        self._outbox.append(pcm)
        self._queued_frames += 1
        self._wake.set()

    def end_of_speech(self) -> None:
        if not self._closing:
            self._send_control(FINALIZE)

    def new_turn(self) -> None:
        return None  # Deepgram's finals are per utterance

    async def results(self) -> AsyncIterator[Transcript]:
        while (transcript := await self._results.get()) is not None:
            yield transcript
        if self._failure:
            raise SttError(self._failure)

    async def aclose(self) -> None:
        if self._closing:
            return
        self._send_control(CLOSE_STREAM)
        self._closing = True
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await asyncio.shield(self._runner)
        except TimeoutError:
            log.warning("deepgram did not close in %.0f s; closing the socket", CLOSE_TIMEOUT_S)
        finally:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        if self.dropped_frames:
            log.warning("deepgram socket fell behind: %d audio frames dropped", self.dropped_frames)

    def _send_control(self, message: str) -> None:
        self._outbox.append(message)
        self._wake.set()

    def _drop_oldest_frame(self) -> None:
        for index, item in enumerate(self._outbox):
            if isinstance(item, bytes):
                del self._outbox[index]
                self._queued_frames -= 1
                self.dropped_frames += 1
                return

    async def _run(self) -> None:
        reconnects_left = RECONNECTS_PER_CALL
        try:
            while True:
                connected = False
                try:
                    async with connect(
                        self._url, additional_headers=self._headers, open_timeout=CONNECT_TIMEOUT_S
                    ) as ws:
                        connected = True
                        log.info("deepgram connected")
                        await self._session(ws)
                    self._failure = "deepgram closed the connection"
                except websockets.InvalidStatus as exc:
                    self._failure = f"deepgram refused the connection ({exc.response.status_code})"
                except (OSError, TimeoutError, websockets.WebSocketException) as exc:
                    self._failure = f"deepgram unreachable ({type(exc).__name__})"
                except Exception:
                    # A bug here must end this call's transcripts loudly, not leave the pipeline waiting.
                    log.exception("deepgram stream failed")
                    self._failure = "deepgram stream failed"
                    return
                if self._closing:
                    self._failure = ""  # however the socket ended, we asked for it
                    return
                # Only a socket that worked and then dropped is worth another try; a refused or
                # unreachable endpoint will refuse again.
                if not connected or reconnects_left == 0:
                    log.error("%s; no more transcripts this call", self._failure)
                    return
                reconnects_left -= 1
                self.reconnects += 1
                log.warning("%s; reconnecting", self._failure)
                self._failure = ""
        finally:
            self._results.put_nowait(None)

    async def _session(self, ws: ClientConnection) -> None:
        """Run one socket until either side ends it."""
        sender = asyncio.create_task(self._send_loop(ws))
        receiver = asyncio.create_task(self._receive_loop(ws))
        try:
            done, _ = await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_COMPLETED)
            if sender in done and not sender.exception():
                await receiver  # CloseStream sent: read the last results until Deepgram closes
        finally:
            for task in (sender, receiver):
                task.cancel()
            for task in (sender, receiver):
                with contextlib.suppress(asyncio.CancelledError, websockets.ConnectionClosed):
                    await task

    async def _send_loop(self, ws: ClientConnection) -> None:
        while True:
            if not self._outbox:
                self._wake.clear()
                try:
                    async with asyncio.timeout(self._keepalive_s):
                        await self._wake.wait()
                except TimeoutError:
                    await ws.send(KEEPALIVE)
                    continue
            item = self._outbox.popleft()
            if isinstance(item, bytes):
                self._queued_frames -= 1
            try:
                await ws.send(item)
            except websockets.ConnectionClosed:
                # Back to the front, so the reconnected socket gets it first.
                self._outbox.appendleft(item)
                if isinstance(item, bytes):
                    self._queued_frames += 1
                raise
            if item == CLOSE_STREAM:
                return

    async def _receive_loop(self, ws: ClientConnection) -> None:
        async for raw in ws:
            if isinstance(raw, bytes):
                continue
            try:
                message = json.loads(raw)
            except json.JSONDecodeError:
                log.warning("deepgram sent a message that is not JSON")
                continue
            if not isinstance(message, dict):
                continue
            if (transcript := parse_result(message)) is not None:
                self._results.put_nowait(transcript)
                log.debug("deepgram result final=%s", transcript.final, extra={"transcript": transcript.text})
            elif message.get("type") in ("UtteranceEnd", "SpeechStarted", "Metadata"):
                log.debug("deepgram %s", message["type"])
            elif message.get("type") == "Error":
                log.warning("deepgram error: %s", str(message.get("description") or message.get("message"))[:200])
