"""One client connection of the fake Realtime server (tests/fakes/realtime_fake.py): its session, its
input audio buffer and VAD, its conversation items and the response it is giving."""

from __future__ import annotations

import asyncio
import base64
import copy
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from websockets.asyncio.server import ServerConnection

from tests.fakes.realtime_voice import (
    EnergyVad,
    chunks,
    pcm_ms,
    render_speech,
    shared_whisper,
    speech_dbfs,
    stub_audio,
    word_pieces,
)

if TYPE_CHECKING:
    from tests.fakes.realtime_fake import FakeRealtime

log = logging.getLogger(__name__)

PCM16_RATE = 24_000  # the beta dialect's "pcm16", and the GA default
MIN_COMMIT_MS = 100  # the real service refuses to commit less ("buffer too small")
MIN_TRANSCRIBED_MS = 150  # shorter is a click: Whisper would invent words for it

# GA event names the beta dialect spells differently.
BETA_NAMES = {
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "response.output_text.delta": "response.text.delta",
    "response.output_text.done": "response.text.done",
    "conversation.item.added": "conversation.item.created",
}
HANDLED = {"session.update", "input_audio_buffer.append", "input_audio_buffer.commit", "input_audio_buffer.clear",
           "conversation.item.create", "conversation.item.truncate", "response.create", "response.cancel"}


def default_turn_detection() -> dict[str, Any]:
    return {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500,
            "create_response": True, "interrupt_response": True}


def default_session(dialect: str, model: str, session_id: str) -> dict[str, Any]:
    common = {"id": session_id, "object": "realtime.session", "model": model, "instructions": "",
              "tools": [], "tool_choice": "auto"}
    if dialect == "beta":
        return {**common, "modalities": ["text", "audio"], "voice": "alloy", "input_audio_format": "pcm16",
                "output_audio_format": "pcm16", "input_audio_transcription": None,
                "turn_detection": default_turn_detection()}
    pcm = {"type": "audio/pcm", "rate": PCM16_RATE}
    return {**common, "type": "realtime", "output_modalities": ["audio"],
            "audio": {"input": {"format": dict(pcm), "transcription": None, "turn_detection": default_turn_detection()},
                      "output": {"format": dict(pcm), "voice": "alloy"}}}


def merged(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """`update` over `base`, nested dicts merged (an explicit null replaces: `turn_detection: null`)."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@dataclass
class Truncation:
    item_id: str
    content_index: int
    audio_end_ms: int


@dataclass
class ResponseRun:
    id: str
    instructions: str
    cancelled: str = ""  # why it was cancelled ("client_cancelled", "turn_detected"), "" while not
    task: asyncio.Task[None] | None = None


@dataclass
class Item:
    role: str  # "user" (words heard or typed), "tool" (a function_call_output)
    text: str = ""
    ready: asyncio.Future[None] | None = None  # a heard turn's transcription, until done


@dataclass(eq=False)  # hashable by identity: Whisper's pool keys its queue by caller
class RealtimeConnection:
    fake: FakeRealtime
    ws: ServerConnection
    params: dict[str, list[str]]
    headers: dict[str, str]
    dialect: str  # "ga" | "beta"
    session: dict[str, Any] = field(default_factory=dict)
    audio: bytearray = field(default_factory=bytearray)  # every appended byte (ms offsets count from here)
    buffer_start: int = 0  # where the uncommitted input buffer begins in `audio`
    vad: EnergyVad | None = None
    speech_item: str = ""  # the item id of the speech under way (server VAD)
    speech_start_ms: int = 0
    items: list[Item] = field(default_factory=list)
    last_item: str | None = None
    audio_items: dict[str, int] = field(default_factory=dict)  # this connection's audio items -> ms sent
    run: ResponseRun | None = None
    closed: bool = False
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def __post_init__(self) -> None:
        model = (self.params.get("model") or [""])[0]
        self.session = default_session(self.dialect, model, self.fake.next_id("sess"))
        self._configure_vad()

    # The session, either dialect ----------------------------------------------------------------

    def session_view(self) -> dict[str, Any]:
        return copy.deepcopy(self.session)

    def turn_detection(self) -> dict[str, Any] | None:
        if self.dialect == "beta":
            return self.session.get("turn_detection")
        return self.session.get("audio", {}).get("input", {}).get("turn_detection")

    def transcription_wanted(self) -> bool:
        if self.dialect == "beta":
            return bool(self.session.get("input_audio_transcription"))
        return bool(self.session.get("audio", {}).get("input", {}).get("transcription"))

    def rate(self, direction: str) -> int:
        if self.dialect == "beta":
            return PCM16_RATE
        return int(self.session.get("audio", {}).get(direction, {}).get("format", {}).get("rate", PCM16_RATE))

    def ms_at(self, offset: int) -> int:
        return offset * 1000 // (2 * self.rate("input"))

    def offset_at(self, ms: int) -> int:
        return ms * self.rate("input") // 1000 * 2

    def _configure_vad(self) -> None:
        detection = self.turn_detection()
        if not detection:
            self.vad = None
            return
        silence = int(detection.get("silence_duration_ms") or 500)  # semantic_vad: as server_vad's default
        threshold = speech_dbfs(float(detection.get("threshold", 0.5)))
        if self.vad is None or self.vad.rate != self.rate("input"):
            self.vad = EnergyVad(self.rate("input"), threshold, silence, heard_ms=self.ms_at(len(self.audio)))
        else:
            self.vad.threshold_dbfs, self.vad.silence_ms = threshold, silence

    # Events -------------------------------------------------------------------------------------

    async def send(self, event: dict[str, Any]) -> None:
        if self.dialect == "beta":
            event["type"] = BETA_NAMES.get(event["type"], event["type"])
        await self.fake.send(self, event)

    async def error(self, code: str, message: str, type_: str = "invalid_request_error") -> None:
        await self.fake.send_error(self, {"type": type_, "code": code, "message": message, "param": None})

    async def on_event(self, event: dict[str, Any]) -> None:
        kind = str(event.get("type", ""))
        if kind not in HANDLED:
            await self.error("invalid_value", f"Invalid value: '{kind}'. This fake handles {sorted(HANDLED)}.")
        elif kind == "session.update":
            self.session = merged(self.session, event.get("session") or {})
            self._configure_vad()
            await self.send({"type": "session.updated", "session": self.session_view()})
        elif kind == "input_audio_buffer.append":
            await self._append(base64.b64decode(event.get("audio", "")))
        elif kind == "input_audio_buffer.commit":
            if self.ms_at(len(self.audio) - self.buffer_start) < MIN_COMMIT_MS:
                await self.error("input_audio_buffer_commit_empty", "buffer too small: expected at least 100ms")
            else:
                await self._commit(self.fake.next_id("item"), self.buffer_start, len(self.audio))
        elif kind == "input_audio_buffer.clear":
            self.buffer_start = len(self.audio)
            await self.send({"type": "input_audio_buffer.cleared"})
        elif kind == "conversation.item.create":
            await self._create_item(dict(event.get("item") or {}))
        elif kind == "conversation.item.truncate":
            await self._truncate(str(event.get("item_id", "")), int(event.get("content_index", 0)),
                                 int(event.get("audio_end_ms", -1)))
        elif kind == "response.create":
            if self.run is not None and not self.run.cancelled:  # a cancelled one is on its way out: queue after it
                await self.error("conversation_already_has_active_response",
                                 f"Conversation already has an active response in progress: {self.run.id}.")
            else:
                self.start_response(str((event.get("response") or {}).get("instructions") or ""))
        elif kind == "response.cancel":
            if self.run is None:
                await self.error("response_cancel_not_active", "Cancellation failed: no active response found")
            else:
                self.run.cancelled = "client_cancelled"

    async def _append(self, pcm: bytes) -> None:
        self.audio += pcm
        if self.vad is None:
            return
        detection = self.turn_detection() or {}
        for what, ms in self.vad.feed(pcm):
            if what == "start":
                self.speech_item = self.fake.next_id("item")
                self.speech_start_ms = max(0, ms - int(detection.get("prefix_padding_ms", 300)))
                await self.send({"type": "input_audio_buffer.speech_started", "audio_start_ms": self.speech_start_ms,
                                 "item_id": self.speech_item})
                if self.run is not None and detection.get("interrupt_response", True):
                    self.run.cancelled = "turn_detected"
            else:
                await self.send({"type": "input_audio_buffer.speech_stopped", "audio_end_ms": ms,
                                 "item_id": self.speech_item})
                start = max(self.buffer_start, self.offset_at(self.speech_start_ms))
                await self._commit(self.speech_item, start, self.offset_at(ms))
                if detection.get("create_response", True) and (self.run is None or self.run.cancelled):
                    self.start_response("")

    async def _commit(self, item_id: str, start: int, end: int) -> None:
        """The input buffer from `start` to `end` becomes a user item, transcribed by Whisper."""
        pcm = bytes(self.audio[start:end])
        self.buffer_start = len(self.audio)
        await self.send({"type": "input_audio_buffer.committed", "previous_item_id": self.last_item,
                         "item_id": item_id})
        await self._added({"id": item_id, "object": "realtime.item", "type": "message", "status": "completed",
                           "role": "user", "content": [{"type": "input_audio", "transcript": None}]})
        item = Item("user", ready=asyncio.get_running_loop().create_future())
        self.items.append(item)
        self._spawn(self._transcribe(item, item_id, pcm))

    async def _transcribe(self, item: Item, item_id: str, pcm: bytes) -> None:
        try:
            rate = self.rate("input")
            if not self.fake.stub and pcm_ms(pcm, rate) >= MIN_TRANSCRIBED_MS:
                item.text = (await shared_whisper().transcribe(pcm, rate, caller=self)).strip()
            self.fake.heard.append(item.text)
            if self.transcription_wanted():
                await self.send({"type": "conversation.item.input_audio_transcription.completed",
                                 "item_id": item_id, "content_index": 0, "transcript": item.text})
        finally:
            assert item.ready is not None
            if not item.ready.done():
                item.ready.set_result(None)

    async def _added(self, item: dict[str, Any]) -> None:
        await self.send({"type": "conversation.item.added", "previous_item_id": self.last_item, "item": item})
        if self.dialect == "ga":
            await self.send({"type": "conversation.item.done", "previous_item_id": self.last_item, "item": item})
        self.last_item = item["id"]

    async def _create_item(self, item: dict[str, Any]) -> None:
        item.setdefault("id", self.fake.next_id("item"))
        if item.get("type") == "function_call_output":
            self.items.append(Item("tool", str(item.get("output", ""))))
        elif item.get("type") == "message" and item.get("role") == "user":
            texts = [str(part.get("text", "")) for part in item.get("content", []) if part.get("type") == "input_text"]
            self.items.append(Item("user", " ".join(texts)))
        await self._added(item)

    async def _truncate(self, item_id: str, content_index: int, audio_end_ms: int) -> None:
        length = self.audio_items.get(item_id)
        if length is None:
            await self.error("item_truncate_invalid_item_id", f"Item with item_id not found: {item_id}")
        elif audio_end_ms < 0 or audio_end_ms > length:
            await self.error("invalid_value",
                             f"Audio content of {length}ms is already shorter than {audio_end_ms}ms")
        else:
            await self.send({"type": "conversation.item.truncated", "item_id": item_id,
                             "content_index": content_index, "audio_end_ms": audio_end_ms})

    # Responses ----------------------------------------------------------------------------------

    def start_response(self, instructions: str) -> None:
        previous = self.run.task if self.run is not None else None
        run = ResponseRun(self.fake.next_id("resp"), instructions)
        self.run = run
        run.task = self._spawn(self._respond(run, previous))

    def _spawn(self, coroutine: Any) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(self._guarded(coroutine))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _guarded(self, coroutine: Any) -> None:
        try:
            await coroutine
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broken fake must fail the test, not go quiet
            log.exception("the fake Realtime server failed")
            self.fake.failures.append(f"{type(exc).__name__}: {exc}")

    async def _respond(self, run: ResponseRun, previous: asyncio.Task[None] | None) -> None:
        if previous is not None:  # a cancelled response finishes (its response.done) before this one starts
            await asyncio.gather(previous, return_exceptions=True)
        response = {"id": run.id, "object": "realtime.response", "status": "in_progress", "output": []}
        await self.send({"type": "response.created", "response": response})
        try:
            waiting = [item.ready for item in self.items if item.ready is not None and not item.ready.done()]
            if waiting:
                await asyncio.gather(*waiting)
            users = [item.text for item in self.items if item.role == "user"]
            after_tools = bool(self.items) and self.items[-1].role == "tool"
            reply = self.fake.decide(run, users[-1] if users else "", after_tools)
            output: list[dict[str, Any]] = []
            if reply.text and not run.cancelled:
                output.append(await self._speak(run, reply.text, len(output)))
            for call in reply.tool_calls:
                if not run.cancelled:
                    output.append(await self._call(run, call.name, call.arguments, call.id, len(output)))
            status = "cancelled" if run.cancelled else "completed"
            details = {"type": "cancelled", "reason": run.cancelled} if run.cancelled else None
            await self.send({"type": "response.done", "response": {
                **response, "status": status, "status_details": details, "output": output,
                "usage": {"total_tokens": 0, "input_tokens": 0, "output_tokens": 0}}})
        finally:
            if self.run is run:
                self.run = None

    async def _speak(self, run: ResponseRun, text: str, index: int) -> dict[str, Any]:
        item_id, rate, fake = self.fake.next_id("item"), self.rate("output"), self.fake
        part_type = "audio" if self.dialect == "beta" else "output_audio"
        where = {"response_id": run.id, "item_id": item_id, "output_index": index, "content_index": 0}
        item = {"id": item_id, "object": "realtime.item", "type": "message", "status": "in_progress",
                "role": "assistant", "content": []}
        await self.send({"type": "response.output_item.added", "response_id": run.id, "output_index": index,
                         "item": item})
        await self._added(dict(item))
        await self.send({"type": "response.content_part.added", **where, "part": {"type": part_type, "transcript": ""}})
        pcm = stub_audio(fake.stub_ms, rate) if fake.stub else await asyncio.to_thread(render_speech, text, rate)
        fake.said.append(text)
        fake.item_text[item_id] = text
        fake.audio_items[item_id] = self.audio_items[item_id] = 0
        pieces = chunks(pcm, rate, fake.chunk_ms)
        spoken = ""
        for chunk, words in zip(pieces, word_pieces(text, len(pieces)), strict=True):
            if run.cancelled or self.closed:
                break
            await self.send({"type": "response.output_audio.delta", **where,
                             "delta": base64.b64encode(chunk).decode()})
            fake.audio_items[item_id] = self.audio_items[item_id] = self.audio_items[item_id] + pcm_ms(chunk, rate)
            if words:
                spoken += words
                await self.send({"type": "response.output_audio_transcript.delta", **where, "delta": words})
            if not fake.stub:
                await asyncio.sleep(fake.chunk_ms / fake.speed / 1000)
        spoken = text if not run.cancelled else spoken.strip()
        await self.send({"type": "response.output_audio.done", **where})
        await self.send({"type": "response.output_audio_transcript.done", **where, "transcript": spoken})
        part = {"type": part_type, "transcript": spoken}
        await self.send({"type": "response.content_part.done", **where, "part": part})
        done = {**item, "status": "incomplete" if run.cancelled else "completed", "content": [part]}
        await self.send({"type": "response.output_item.done", "response_id": run.id, "output_index": index,
                         "item": done})
        return done

    async def _call(self, run: ResponseRun, name: str, arguments: str, call_id: str, index: int) -> dict[str, Any]:
        item_id = self.fake.next_id("item")
        call_id = call_id or self.fake.next_id("call")
        item = {"id": item_id, "object": "realtime.item", "type": "function_call", "status": "in_progress",
                "name": name, "call_id": call_id, "arguments": ""}
        where = {"response_id": run.id, "item_id": item_id, "output_index": index, "call_id": call_id}
        await self.send({"type": "response.output_item.added", "response_id": run.id, "output_index": index,
                         "item": item})
        await self._added(dict(item))
        await self.send({"type": "response.function_call_arguments.delta", **where, "delta": arguments})
        await self.send({"type": "response.function_call_arguments.done", **where, "name": name,
                         "arguments": arguments})
        done = {**item, "status": "completed", "arguments": arguments}
        await self.send({"type": "response.output_item.done", "response_id": run.id, "output_index": index,
                         "item": done})
        return done

    async def close(self) -> None:
        self.closed = True
        if self.run is not None:
            self.run.cancelled = self.run.cancelled or "client_disconnected"
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
