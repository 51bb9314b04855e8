"""The fake Realtime server (tests/fakes/realtime_fake.py), driven by a raw WebSocket client: what it
records, how it hears (energy VAD, Whisper), thinks (scripts, tool calls) and speaks (Piper), both
dialects, and its faults. The pipeline's own tests trust what is checked here."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosedError, InvalidStatus

from tests.fakes.openai_fake import ScriptedReply, ScriptedToolCall
from tests.fakes.realtime_fake import FakeRealtime
from tests.fakes.realtime_voice import pcm_ms, render_speech, shared_whisper
from tests.speech import neural, silence, tone

KEY = "rt-test-key"
WAIT_S = 120.0  # generous: Whisper and Piper share two loaded cores with other tests


def ga_session(*, input_rate: int = 24000, output_rate: int = 24000, detection: dict[str, Any] | None = None,
               transcription: bool = True, instructions: str = "You are a test.") -> dict[str, Any]:
    return {"type": "realtime", "model": "gpt-realtime", "instructions": instructions, "output_modalities": ["audio"],
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": input_rate},
                                **({"transcription": {"model": "gpt-4o-mini-transcribe"}} if transcription else {}),
                                "turn_detection": detection},
                      "output": {"format": {"type": "audio/pcm", "rate": output_rate}, "voice": "alloy"}},
            "tools": [], "tool_choice": "auto"}


SERVER_VAD = {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500,
              "create_response": True, "interrupt_response": True}


@asynccontextmanager
async def client(fake: FakeRealtime, *, beta: bool = False, key: str = KEY) -> AsyncIterator[ClientConnection]:
    headers = {"Authorization": f"Bearer {key}", **({"OpenAI-Beta": "realtime=v1"} if beta else {})}
    async with connect(fake.url + "?model=gpt-realtime", additional_headers=headers, max_size=None) as ws:
        yield ws


async def send(ws: ClientConnection, event: dict[str, Any]) -> None:
    await ws.send(json.dumps(event))


async def append(ws: ClientConnection, pcm: bytes, rate: int) -> None:
    """One input_audio_buffer.append per 20 ms frame, as the pipeline sends them (no pacing: the fake counts
    samples, not wall time)."""
    frame = rate // 50 * 2
    for start in range(0, len(pcm), frame):
        chunk = base64.b64encode(pcm[start:start + frame]).decode()
        await send(ws, {"type": "input_audio_buffer.append", "audio": chunk})


async def until(ws: ClientConnection, done: Callable[[dict[str, Any]], bool], seen: list[dict[str, Any]] | None = None,
                timeout: float = WAIT_S) -> list[dict[str, Any]]:
    """Events received up to and including the first one `done` accepts (added to `seen` if given)."""
    events = seen if seen is not None else []
    async with asyncio.timeout(timeout):
        while True:
            event = json.loads(await ws.recv())
            events.append(event)
            if done(event):
                return events


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def reply_audio(events: list[dict[str, Any]], kind: str = "response.output_audio.delta") -> bytes:
    return b"".join(base64.b64decode(e["delta"]) for e in of_type(events, kind))


async def test_session_update_is_recorded_and_answered_and_a_wrong_key_is_refused() -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        async with client(fake) as ws:
            created = json.loads(await ws.recv())
            assert created["type"] == "session.created" and created["session"]["model"] == "gpt-realtime"
            session = ga_session(instructions="Remember: the caller's dog is Rex.")
            await send(ws, {"type": "session.update", "session": session})
            (updated,) = await until(ws, lambda e: e["type"] == "session.updated")
            assert updated["session"]["instructions"] == session["instructions"]
            await send(ws, {"type": "session.update", "session": {"type": "realtime", "instructions": "Newer."}})
            (updated,) = await until(ws, lambda e: e["type"] == "session.updated")
            # Only the instructions changed: the audio settings of the first update still hold.
            assert updated["session"]["instructions"] == "Newer."
            assert updated["session"]["audio"]["input"]["turn_detection"] is None
        assert fake.sessions == [session, {"type": "realtime", "instructions": "Newer."}]
        assert fake.instructions == "Newer."
        assert fake.connections[0].params["model"] == ["gpt-realtime"] and fake.connections[0].dialect == "ga"
        with pytest.raises(InvalidStatus) as refused:
            async with client(fake, key="wrong"):
                pass
        assert refused.value.response.status_code == 401 and fake.rejected == [401]
        # Azure's header is accepted too.
        async with connect(fake.url, additional_headers={"api-key": KEY}) as ws:
            assert json.loads(await ws.recv())["type"] == "session.created"
        assert not fake.failures


@pytest.mark.slow
async def test_spoken_turn_is_heard_by_whisper_and_answered_in_piper_at_the_output_rate() -> None:
    async with FakeRealtime(api_key=KEY) as fake, client(fake) as ws:
        fake.script_reply("The parcel arrives on Monday.")
        await send(ws, {"type": "session.update", "session": ga_session(output_rate=16000, detection=SERVER_VAD)})
        (speech,) = await asyncio.to_thread(neural, ["When does my parcel arrive?"], 24000)
        await append(ws, silence(400, 24000) + speech + silence(1000, 24000), 24000)
        events = await until(ws, lambda e: e["type"] == "response.done")
        kinds = [e["type"] for e in events]
        for before, after in [("input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped"),
                              ("input_audio_buffer.speech_stopped", "input_audio_buffer.committed"),
                              ("input_audio_buffer.committed", "response.created"),
                              ("response.created", "response.output_audio.delta"),
                              ("response.output_audio.delta", "response.output_audio_transcript.done")]:
            assert kinds.index(before) < kinds.index(after), kinds
        started, stopped = of_type(events, "input_audio_buffer.speech_started")[0], \
            of_type(events, "input_audio_buffer.speech_stopped")[0]
        assert started["item_id"] == stopped["item_id"]
        assert 0 <= started["audio_start_ms"] < 400 < stopped["audio_end_ms"] <= 400 + pcm_ms(speech, 24000) + 100
        (heard,) = of_type(events, "conversation.item.input_audio_transcription.completed")
        assert "parcel" in heard["transcript"].lower() and fake.heard == [heard["transcript"]]
        (said,) = of_type(events, "response.output_audio_transcript.done")
        assert said["transcript"] == "The parcel arrives on Monday."
        deltas = of_type(events, "response.output_audio.delta")
        assert len(deltas) > 5 and {d["item_id"] for d in deltas} == {said["item_id"]}
        # The reply's audio is that sentence in the Piper voice at 16 kHz, all of it.
        audio = reply_audio(events)
        expected = await asyncio.to_thread(render_speech, "The parcel arrives on Monday.", 16000)
        assert len(audio) == len(expected) and fake.audio_items[said["item_id"]] == pcm_ms(audio, 16000)
        words = (await shared_whisper().transcribe(audio, 16000)).lower()
        assert "parcel" in words and "monday" in words, words
        assert of_type(events, "response.done")[0]["response"]["status"] == "completed"
        assert not fake.failures


@pytest.mark.slow
async def test_beta_dialect_with_client_turns_commits_then_answers_what_it_heard() -> None:
    async with FakeRealtime() as fake, client(fake, beta=True) as ws:
        await send(ws, {"type": "session.update", "session": {
            "modalities": ["text", "audio"], "instructions": "Echo.", "voice": "alloy", "input_audio_format": "pcm16",
            "output_audio_format": "pcm16", "input_audio_transcription": {"model": "whisper-1"},
            "turn_detection": None, "tools": [], "tool_choice": "auto"}})
        (speech,) = await asyncio.to_thread(neural, ["Please call me back tomorrow."], 24000)
        await append(ws, speech, 24000)
        await send(ws, {"type": "input_audio_buffer.commit"})
        await send(ws, {"type": "response.create"})
        events = await until(ws, lambda e: e["type"] == "response.done")
        assert not of_type(events, "input_audio_buffer.speech_started")  # turn_detection null: no VAD
        kinds = {e["type"] for e in events}
        assert {"conversation.item.created", "response.audio.delta", "response.audio_transcript.done"} <= kinds
        assert not kinds & {"conversation.item.added", "response.output_audio.delta"}
        (heard,) = of_type(events, "conversation.item.input_audio_transcription.completed")
        assert "tomorrow" in heard["transcript"].lower()
        (said,) = of_type(events, "response.audio_transcript.done")
        assert said["transcript"] == f"You said: {heard['transcript']}"  # the echo brain
        assert len(reply_audio(events, "response.audio.delta")) > 24000  # over half a second at 24 kHz
        assert fake.connections[0].dialect == "beta"
        assert not fake.failures


async def test_tool_calls_end_the_response_and_their_outputs_get_the_next_scripted_reply() -> None:
    async with FakeRealtime(stub=True) as fake, client(fake) as ws:
        fake.script(ScriptedReply(tool_calls=[ScriptedToolCall("memory", '{"action": "append", "text": "a"}', "c1"),
                                              ScriptedToolCall("memory", '{"action": "append", "text": "b"}', "c2")]))
        fake.script_reply("Noted both.")
        await send(ws, {"type": "session.update", "session": ga_session(detection=None)})
        await send(ws, {"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Remember a and b."}]}})
        await send(ws, {"type": "response.create"})
        events = await until(ws, lambda e: e["type"] == "response.done")
        done = events[-1]["response"]
        assert done["status"] == "completed"
        assert [(i["type"], i["call_id"], i["name"]) for i in done["output"]] == [
            ("function_call", "c1", "memory"), ("function_call", "c2", "memory")]
        assert json.loads(done["output"][1]["arguments"]) == {"action": "append", "text": "b"}
        assert len(of_type(events, "response.function_call_arguments.done")) == 2
        assert not of_type(events, "response.output_audio.delta")
        for call_id in ("c1", "c2"):
            await send(ws, {"type": "conversation.item.create",
                            "item": {"type": "function_call_output", "call_id": call_id, "output": "ok"}})
        await send(ws, {"type": "response.create"})
        events = await until(ws, lambda e: e["type"] == "response.done")
        (said,) = of_type(events, "response.output_audio_transcript.done")
        assert said["transcript"] == "Noted both." and of_type(events, "response.output_audio.delta")
        assert fake.function_outputs == [("c1", "ok"), ("c2", "ok")] and fake.responses_created == 2
        # With nothing scripted, the echo brain answers the typed words; a greeting's instructions are said verbatim.
        await send(ws, {"type": "response.create", "response": {
            "instructions": 'Say exactly this greeting, word for word: "Welcome to the test line."'}})
        events = await until(ws, lambda e: e["type"] == "response.done")
        assert of_type(events, "response.output_audio_transcript.done")[0]["transcript"] == "Welcome to the test line."
        assert not fake.failures


async def test_truncate_is_recorded_and_answered_and_past_the_end_is_an_error() -> None:
    async with FakeRealtime(stub=True, stub_ms=800) as fake, client(fake) as ws:
        await send(ws, {"type": "session.update", "session": ga_session(detection=None, transcription=False)})
        await send(ws, {"type": "response.create"})
        events = await until(ws, lambda e: e["type"] == "response.done")
        item_id = of_type(events, "response.output_audio.delta")[0]["item_id"]
        assert fake.audio_items == {item_id: 800} and pcm_ms(reply_audio(events), 24000) == 800
        await send(ws, {"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0,
                        "audio_end_ms": 300})
        (truncated,) = await until(ws, lambda e: e["type"] in ("conversation.item.truncated", "error"))
        assert (truncated["type"], truncated["item_id"], truncated["audio_end_ms"]) == (
            "conversation.item.truncated", item_id, 300)
        await send(ws, {"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0,
                        "audio_end_ms": 900})
        (error,) = await until(ws, lambda e: e["type"] in ("conversation.item.truncated", "error"))
        assert error["type"] == "error" and error["error"]["code"] == "invalid_value"
        await send(ws, {"type": "response.cancel"})  # nothing to cancel: the real service says so
        (error,) = await until(ws, lambda e: e["type"] == "error")
        assert error["error"]["code"] == "response_cancel_not_active"
        assert [(t.item_id, t.audio_end_ms) for t in fake.truncations] == [(item_id, 300), (item_id, 900)]
        assert not fake.failures


async def test_the_stub_answers_with_its_burst_and_never_wakes_whisper_or_piper() -> None:
    async with FakeRealtime(stub=True, stub_ms=400) as fake, client(fake) as ws:
        await send(ws, {"type": "session.update", "session": ga_session(detection=SERVER_VAD, output_rate=8000)})
        await append(ws, silence(200, 24000) + tone(600, 24000) + silence(700, 24000), 24000)
        events = await until(ws, lambda e: e["type"] == "response.done")
        assert of_type(events, "input_audio_buffer.speech_stopped")
        assert of_type(events, "conversation.item.input_audio_transcription.completed")[0]["transcript"] == ""
        assert pcm_ms(reply_audio(events), 8000) == 400
        assert fake.said == ["Hello."] and fake.heard == [""]
        assert not fake.failures


@pytest.mark.slow
async def test_caller_speech_over_a_reply_cancels_it_turn_detected() -> None:
    long_reply = ("Our opening hours are nine to six on weekdays, ten to four on Saturdays, "
                  "and we are closed on Sundays and public holidays.")
    async with FakeRealtime(speed=1.0) as fake, client(fake) as ws:  # real time: still streaming when spoken over
        fake.script_reply(long_reply)
        await send(ws, {"type": "session.update", "session": ga_session(detection=SERVER_VAD)})
        await send(ws, {"type": "response.create"})
        events = await until(ws, lambda e: e["type"] == "response.output_audio.delta")
        await append(ws, tone(600, 24000) + silence(700, 24000), 24000)
        events = await until(ws, lambda e: e["type"] == "response.done", events)
        done = events[-1]["response"]
        assert done["status"] == "cancelled" and done["status_details"]["reason"] == "turn_detected"
        assert done["output"][0]["status"] == "incomplete"
        item_id = done["output"][0]["id"]
        full = await asyncio.to_thread(render_speech, long_reply, 24000)
        assert 0 < fake.audio_items[item_id] < pcm_ms(full, 24000)
        assert of_type(events, "input_audio_buffer.speech_started")
        assert not fake.failures


async def test_faults_refused_handshake_drop_stall_and_error_event() -> None:
    async with FakeRealtime(stub=True) as fake:
        fake.fail_connect = 429
        with pytest.raises(InvalidStatus) as refused:
            async with client(fake):
                pass
        assert refused.value.response.status_code == 429 and fake.rejected == [429]
        fake.fail_connect = None

        fake.drop_after("response.created")
        async with client(fake) as ws:
            await send(ws, {"type": "response.create"})
            with pytest.raises(ConnectionClosedError):
                await until(ws, lambda e: False)
        fake.drop_after(0.2)
        async with client(fake) as ws:
            with pytest.raises(ConnectionClosedError):
                await until(ws, lambda e: False)

        fake.error_next("server_error", "server_error", "The server had an error.", on="response.create")
        async with client(fake) as ws:
            await send(ws, {"type": "session.update", "session": {"type": "realtime", "instructions": "Hi."}})
            await send(ws, {"type": "response.create"})
            events = await until(ws, lambda e: e["type"] == "error")
            assert events[-1]["error"]["type"] == "server_error" and of_type(events, "session.updated")
            assert not of_type(events, "response.created")  # that response.create was not acted on

        fake.stall = True
        async with client(fake) as ws:
            await send(ws, {"type": "response.create"})
            with pytest.raises(TimeoutError):
                await until(ws, lambda e: True, timeout=1.0)
        fake.stall = False

        fake.hang_handshake = True  # the TCP connection is taken, the upgrade never answered
        with pytest.raises(TimeoutError):
            async with connect(fake.url, additional_headers={"Authorization": f"Bearer {KEY}"}, open_timeout=0.5):
                pass
        fake.hang_handshake = False
        assert fake.responses_created == 3 and not fake.failures
