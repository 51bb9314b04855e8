"""The OpenAI Realtime WebSocket protocol, as data: the client events we send and the server events we read.

Pure builders and a normaliser, no I/O, so both dialects are table-tested (tests/realtime/test_protocol.py):
`ga` is the generally available API (OpenAI's gpt-realtime, Azure's GA deployments); `beta` the preview
shape that Azure's older deployments and Qwen-Omni-Realtime still speak. Server events are read under their
GA names: `normalise` renames the beta aliases, so the pipeline handles one vocabulary.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from voicegate.internal.config.providers import RealtimeConfig

Event = dict[str, Any]

# Beta server event names -> their GA names (the payloads are the same).
BETA_ALIASES = {
    "response.audio.delta": "response.output_audio.delta",
    "response.audio.done": "response.output_audio.done",
    "response.audio_transcript.delta": "response.output_audio_transcript.delta",
    "response.audio_transcript.done": "response.output_audio_transcript.done",
    "response.text.delta": "response.output_text.delta",
    "response.text.done": "response.output_text.done",
    "conversation.item.created": "conversation.item.added",
}


def normalise(event: Event) -> Event:
    """The event under its GA name (either dialect may arrive: a GA server still sends some old names)."""
    kind = event.get("type")
    if isinstance(kind, str) and kind in BETA_ALIASES:
        return {**event, "type": BETA_ALIASES[kind]}
    return event


def parse(message: str | bytes) -> Event | None:
    """One server message as a normalised event; None for anything that is not a JSON object with a type
    (a broken frame is dropped, not a reason to end the call)."""
    try:
        event = json.loads(message)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        return None
    return normalise(event)


# ---- connecting -------------------------------------------------------------------------------------

def connect_url(config: RealtimeConfig) -> str:
    """The endpoint with `?model=` added, unless the URL names a model already (Azure's deployments put
    theirs in the URL as `deployment=`, which is left alone too)."""
    query = parse_qs(urlsplit(config.url).query)
    if "model" in query or "deployment" in query or not config.model:
        return config.url
    separator = "&" if "?" in config.url else "?"
    return config.url + separator + urlencode({"model": config.model})


def connect_headers(config: RealtimeConfig, api_key: str) -> dict[str, str]:
    """The handshake's headers: the key the way the provider wants it; the beta dialect asks for it by name."""
    headers: dict[str, str] = {}
    if api_key:
        if config.auth == "api-key":
            headers["api-key"] = api_key
        else:
            headers["Authorization"] = f"Bearer {api_key}"
    if config.dialect == "beta":
        headers["OpenAI-Beta"] = "realtime=v1"
    return headers


# ---- the session ------------------------------------------------------------------------------------

def turn_detection(config: RealtimeConfig, barge_in: bool = True) -> dict[str, Any] | None:
    """The model's own turn detection, or None when voicegate's VAD owns the turn (we then commit the
    buffer and ask for a response ourselves). `barge_in` False (pipeline.barge_in): the caller's speech
    does not cut the model's response short on the server either."""
    if config.turn_detection == "voicegate":
        return None
    if config.turn_detection == "semantic_vad":
        # Semantic VAD has no energy threshold or silence length: it judges the words.
        return {"type": "semantic_vad", "create_response": True, "interrupt_response": barge_in}
    return {"type": "server_vad", "threshold": config.vad_threshold, "prefix_padding_ms": config.prefix_padding_ms,
            "silence_duration_ms": config.silence_ms, "create_response": True, "interrupt_response": barge_in}


def function_tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "name": name, "description": description, "parameters": parameters}


def session_update(config: RealtimeConfig, instructions: str, tools: list[dict[str, Any]], *,
                   barge_in: bool = True) -> Event:
    """The session at the start of a call: instructions, tools, audio formats, voice and turn detection."""
    detection = turn_detection(config, barge_in)
    if config.dialect == "beta":
        session: dict[str, Any] = {
            "modalities": ["text", "audio"], "instructions": instructions, "voice": config.voice,
            "input_audio_format": "pcm16", "output_audio_format": "pcm16", "turn_detection": detection,
            "tools": tools, "tool_choice": "auto"}
        if config.transcription_model:
            session["input_audio_transcription"] = {"model": config.transcription_model}
        return {"type": "session.update", "session": session}
    audio_in: dict[str, Any] = {"format": {"type": "audio/pcm", "rate": config.input_rate}}
    if config.transcription_model:
        audio_in["transcription"] = {"model": config.transcription_model}
    audio_in["turn_detection"] = detection
    return {"type": "session.update", "session": {
        "type": "realtime", "model": config.model, "instructions": instructions, "output_modalities": ["audio"],
        "audio": {"input": audio_in,
                  "output": {"format": {"type": "audio/pcm", "rate": config.output_rate}, "voice": config.voice}},
        "tools": tools, "tool_choice": "auto"}}


def instructions_update(config: RealtimeConfig, instructions: str | None,
                        tools: list[dict[str, Any]] | None = None) -> Event:
    """Only what changed between turns (the instructions when memory changed, the tools when the call's
    offer changed, e.g. an MCP server back up): the session, voice and audio stay as they are."""
    session: dict[str, Any] = {}
    if instructions is not None:
        session["instructions"] = instructions
    if tools is not None:
        session["tools"] = tools
    if config.dialect == "ga":
        session = {"type": "realtime", **session}
    return {"type": "session.update", "session": session}


# ---- audio and conversation -------------------------------------------------------------------------

def audio_append(pcm: bytes) -> Event:
    return {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode("ascii")}


def audio_commit() -> Event:
    return {"type": "input_audio_buffer.commit"}


def audio_clear() -> Event:
    return {"type": "input_audio_buffer.clear"}


def user_text(text: str) -> Event:
    return {"type": "conversation.item.create",
            "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}


def earlier_message(config: RealtimeConfig, role: str, text: str) -> Event:
    """A line of the conversation before this connection (a resumed call: a new socket, the same talk), so
    the model carries on from it; the agent's lines as the assistant's text."""
    if role == "user":
        return user_text(text)
    kind = "text" if config.dialect == "beta" else "output_text"
    return {"type": "conversation.item.create",
            "item": {"type": "message", "role": "assistant", "content": [{"type": kind, "text": text}]}}


def function_output(call_id: str, output: str) -> Event:
    return {"type": "conversation.item.create",
            "item": {"type": "function_call_output", "call_id": call_id, "output": output}}


def truncate(item_id: str, audio_end_ms: int) -> Event:
    """The model's audio item cut where the caller stopped hearing it: its transcript and what the model
    remembers of its own turn end there too."""
    return {"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0,
            "audio_end_ms": max(0, int(audio_end_ms))}


def response_create(instructions: str | None = None) -> Event:
    response: dict[str, Any] = {}
    if instructions:
        response["instructions"] = instructions
    return {"type": "response.create", "response": response}


def response_cancel() -> Event:
    return {"type": "response.cancel"}


def verbatim(text: str) -> str:
    """Instructions for a fixed line (the greeting, a transport's announcement): the model's voice, our words."""
    return f"Say exactly the following to the caller, word for word, and nothing else: {text}"


def keypad_text(digits: str) -> str:
    """Keys as the cascade writes them into the conversation (internal/pipeline/responder.py)."""
    return f"[The caller pressed keypad keys: {' '.join(digits)}]"


# ---- reading server events --------------------------------------------------------------------------

def audio_delta(event: Event) -> bytes:
    """The PCM16 of a `response.output_audio.delta` (empty when the payload is not base64)."""
    try:
        return base64.b64decode(event.get("delta") or "", validate=True)
    except (ValueError, TypeError):
        return b""


def function_calls(event: Event) -> list[tuple[str, str, str]]:
    """(call_id, name, arguments JSON) of each function call a `response.done` carries, in order."""
    output = (event.get("response") or {}).get("output") or []
    return [(str(item.get("call_id") or ""), str(item.get("name") or ""), str(item.get("arguments") or ""))
            for item in output if isinstance(item, dict) and item.get("type") == "function_call"]


def response_status(event: Event) -> tuple[str, dict[str, Any]]:
    """A `response.done`'s status and its error (type, code) if any."""
    response = event.get("response") or {}
    details = response.get("status_details") or {}
    error = details.get("error") if isinstance(details, dict) else None
    return str(response.get("status") or "completed"), error if isinstance(error, dict) else {}


def error_of(event: Event) -> tuple[str, str, str]:
    """(type, code, message) of an `error` event."""
    error = event.get("error") or {}
    if not isinstance(error, dict):
        return "", "", str(error)
    return str(error.get("type") or ""), str(error.get("code") or ""), str(error.get("message") or "")


# Codes that end the model's usefulness for this call: retrying in the same session does not help.
FATAL_CODES = frozenset({"rate_limit_exceeded", "insufficient_quota", "invalid_api_key", "session_expired",
                         "server_error", "unauthorized", "forbidden"})


def error_ends_call(error_type: str, code: str) -> bool:
    """Does this error mean the model will not answer any more (rate limited, the server broken, the key
    refused), rather than one request of ours being wrong (a truncate past the audio, a cancel with no
    response running, an unknown event), which the call survives?"""
    kind = error_type.lower()
    if code in FATAL_CODES:
        return True
    return any(word in kind for word in ("rate_limit", "server", "auth", "quota"))
