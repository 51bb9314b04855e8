"""The Realtime protocol's builders and normaliser, both dialects (internal/realtime/protocol.py)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from voicegate.internal.config.providers import RealtimeConfig
from voicegate.internal.realtime import protocol


def test_beta_event_names_read_as_ga() -> None:
    for beta, ga in protocol.BETA_ALIASES.items():
        assert protocol.normalise({"type": beta, "delta": "x"}) == {"type": ga, "delta": "x"}
    ga_event = {"type": "response.output_audio.delta", "delta": "x"}
    assert protocol.normalise(ga_event) is ga_event


@pytest.mark.parametrize(("message", "expected"), [
    ('{"type": "response.audio.done", "item_id": "i"}', {"type": "response.output_audio.done", "item_id": "i"}),
    ('{"type": "session.created"}', {"type": "session.created"}),
    ("not json", None),
    ("[1, 2]", None),
    ('{"no": "type"}', None),
    (b'{"type": "error", "error": {}}', {"type": "error", "error": {}}),
])
def test_parse(message: str | bytes, expected: dict[str, Any] | None) -> None:
    assert protocol.parse(message) == expected


@pytest.mark.parametrize(("url", "model", "expected"), [
    ("wss://api.openai.com/v1/realtime", "gpt-realtime", "wss://api.openai.com/v1/realtime?model=gpt-realtime"),
    ("wss://x/v1/realtime?model=mine", "gpt-realtime", "wss://x/v1/realtime?model=mine"),
    ("wss://x.openai.azure.com/openai/realtime?api-version=2025-04-01-preview&deployment=d", "m",
     "wss://x.openai.azure.com/openai/realtime?api-version=2025-04-01-preview&deployment=d"),
    ("wss://x/realtime?api-version=1", "qwen-omni", "wss://x/realtime?api-version=1&model=qwen-omni"),
])
def test_connect_url(url: str, model: str, expected: str) -> None:
    assert protocol.connect_url(RealtimeConfig(url=url, model=model)) == expected


@pytest.mark.parametrize(("auth", "dialect", "key", "expected"), [
    ("bearer", "ga", "k", {"Authorization": "Bearer k"}),
    ("api-key", "ga", "k", {"api-key": "k"}),
    ("bearer", "beta", "k", {"Authorization": "Bearer k", "OpenAI-Beta": "realtime=v1"}),
    ("bearer", "ga", "", {}),
])
def test_connect_headers(auth: str, dialect: str, key: str, expected: dict[str, str]) -> None:
    config = RealtimeConfig(auth=auth, dialect=dialect)  # type: ignore[arg-type]
    assert protocol.connect_headers(config, key) == expected


def test_turn_detection() -> None:
    assert protocol.turn_detection(RealtimeConfig(turn_detection="voicegate")) is None
    server = protocol.turn_detection(RealtimeConfig(vad_threshold=0.6, silence_ms=700, prefix_padding_ms=200))
    assert server == {"type": "server_vad", "threshold": 0.6, "prefix_padding_ms": 200, "silence_duration_ms": 700,
                      "create_response": True, "interrupt_response": True}
    semantic = protocol.turn_detection(RealtimeConfig(turn_detection="semantic_vad"))
    assert semantic is not None and semantic["type"] == "semantic_vad"
    quiet = protocol.turn_detection(RealtimeConfig(), barge_in=False)  # pipeline.barge_in = false
    assert quiet is not None and quiet["interrupt_response"] is False


TOOLS = [protocol.function_tool("memory", "the caller's memory", {"type": "object", "properties": {}})]


def test_ga_session_update() -> None:
    config = RealtimeConfig(input_rate=16000, output_rate=24000, voice="marin")
    event = protocol.session_update(config, "Be brief.", TOOLS)
    assert event == {"type": "session.update", "session": {
        "type": "realtime", "model": "gpt-realtime", "instructions": "Be brief.", "output_modalities": ["audio"],
        "audio": {
            "input": {"format": {"type": "audio/pcm", "rate": 16000},
                      "transcription": {"model": "gpt-4o-mini-transcribe"},
                      "turn_detection": protocol.turn_detection(config)},
            "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "marin"}},
        "tools": TOOLS, "tool_choice": "auto"}}
    json.dumps(event)  # it goes on the wire as JSON


def test_beta_session_update() -> None:
    config = RealtimeConfig(dialect="beta", turn_detection="voicegate", transcription_model="")
    event = protocol.session_update(config, "Be brief.", TOOLS)
    assert event == {"type": "session.update", "session": {
        "modalities": ["text", "audio"], "instructions": "Be brief.", "voice": "alloy",
        "input_audio_format": "pcm16", "output_audio_format": "pcm16", "turn_detection": None,
        "tools": TOOLS, "tool_choice": "auto"}}
    with_transcription = protocol.session_update(RealtimeConfig(dialect="beta"), "x", [])
    assert with_transcription["session"]["input_audio_transcription"] == {"model": "gpt-4o-mini-transcribe"}


def test_ga_without_transcription_model_leaves_it_out() -> None:
    event = protocol.session_update(RealtimeConfig(transcription_model=""), "x", [])
    assert "transcription" not in event["session"]["audio"]["input"]


def test_instructions_update_changes_only_the_instructions() -> None:
    assert protocol.instructions_update(RealtimeConfig(), "new") == {
        "type": "session.update", "session": {"type": "realtime", "instructions": "new"}}
    assert protocol.instructions_update(RealtimeConfig(dialect="beta"), "new") == {
        "type": "session.update", "session": {"instructions": "new"}}
    tool = {"type": "function", "name": "lookup", "description": "", "parameters": {}}
    assert protocol.instructions_update(RealtimeConfig(), None, [tool]) == {
        "type": "session.update", "session": {"type": "realtime", "tools": [tool]}}


def test_client_events() -> None:
    pcm = bytes(range(10))
    append = protocol.audio_append(pcm)
    assert append["type"] == "input_audio_buffer.append" and base64.b64decode(append["audio"]) == pcm
    assert protocol.audio_commit() == {"type": "input_audio_buffer.commit"}
    assert protocol.audio_clear() == {"type": "input_audio_buffer.clear"}
    assert protocol.user_text("hi") == {"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}}
    assert protocol.function_output("c1", "ok") == {"type": "conversation.item.create", "item": {
        "type": "function_call_output", "call_id": "c1", "output": "ok"}}
    assert protocol.truncate("item_1", 1234.7) == {  # type: ignore[arg-type]
        "type": "conversation.item.truncate", "item_id": "item_1", "content_index": 0, "audio_end_ms": 1234}
    assert protocol.truncate("item_1", -5)["audio_end_ms"] == 0
    assert protocol.response_create() == {"type": "response.create", "response": {}}
    assert protocol.response_create("Say hi")["response"] == {"instructions": "Say hi"}
    assert protocol.response_cancel() == {"type": "response.cancel"}
    assert protocol.keypad_text("123") == "[The caller pressed keypad keys: 1 2 3]"
    assert "Hello there." in protocol.verbatim("Hello there.")


def test_reading_server_events() -> None:
    pcm = b"\x01\x00\x02\x00"
    assert protocol.audio_delta({"delta": base64.b64encode(pcm).decode()}) == pcm
    assert protocol.audio_delta({"delta": "%%%"}) == b""
    done = {"type": "response.done", "response": {"id": "r", "status": "completed", "output": [
        {"type": "message", "id": "m"},
        {"type": "function_call", "call_id": "c1", "name": "memory", "arguments": '{"action": "read"}'},
        {"type": "function_call", "call_id": "c2", "name": "memory", "arguments": "{}"}]}}
    assert protocol.function_calls(done) == [("c1", "memory", '{"action": "read"}'), ("c2", "memory", "{}")]
    assert protocol.response_status(done) == ("completed", {})
    failed = {"response": {"status": "failed", "status_details": {"error": {"type": "server_error"}}}}
    assert protocol.response_status(failed) == ("failed", {"type": "server_error"})
    assert protocol.error_of({"error": {"type": "invalid_request_error", "code": "x", "message": "m"}}) == (
        "invalid_request_error", "x", "m")


@pytest.mark.parametrize(("error_type", "code", "fatal"), [
    ("rate_limit_error", "", True),
    ("server_error", "", True),
    ("invalid_request_error", "invalid_api_key", True),
    ("authentication_error", "", True),
    ("invalid_request_error", "rate_limit_exceeded", True),
    ("invalid_request_error", "response_cancel_not_active", False),
    ("invalid_request_error", "invalid_value", False),
    ("", "", False),
])
def test_which_errors_end_the_call(error_type: str, code: str, fatal: bool) -> None:
    assert protocol.error_ends_call(error_type, code) is fatal


def test_earlier_messages_of_a_resumed_call() -> None:
    assert protocol.earlier_message(RealtimeConfig(), "user", "hi") == protocol.user_text("hi")
    assert protocol.earlier_message(RealtimeConfig(), "assistant", "Hello.") == {
        "type": "conversation.item.create",
        "item": {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello."}]}}
    beta = protocol.earlier_message(RealtimeConfig(dialect="beta"), "assistant", "Hello.")
    assert beta["item"]["content"] == [{"type": "text", "text": "Hello."}]
