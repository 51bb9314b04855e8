"""A phone call on the offline defaults: Whisper hears a neural voice through G.711, Piper answers.

The caller's speech comes from Piper's voice, not espeak-ng (the voice pocketsphinx's test grammars
were made for), and the recogniser has no grammar at all: this is what an unknown caller meets.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fakes.models import RecordingModel
from tests.sip_calls.conftest import (
    RtpCapture,
    ServerFactory,
    caller_bye,
    loud_part,
    neural_caller,
    render,
    run_sipp,
    sip_calls_config,
    stream,
)
from tests.speech import cough, neural, silence
from tests.turn.test_turn_models import fragment_before_comma
from voicegate.internal.audio.g711 import ulaw_encode
from voicegate.internal.config import Config
from voicegate.internal.config.sections import PipelineConfig
from voicegate.internal.stt.whisper import WhisperSpeechToText
from voicegate.internal.tts.piper import PiperTextToSpeech

pytestmark = pytest.mark.slow


async def test_a_caller_in_a_neural_voice_is_understood_by_whisper_and_answered_by_piper(
        make_server: ServerFactory, capture: RtpCapture, tmp_path: Path, whisper: WhisperSpeechToText,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="voicegate.internal.sip.voice")
    config = sip_calls_config(tmp_path, symmetric_rtp=False)  # our audio goes to the capture port
    config.tts.provider = "auto"  # the default: Piper, installed by make test
    config.piper.workers = 1
    server = await make_server(stt=whisper, config=config)
    assert server.tts.name == "piper"
    audio = neural_caller(tmp_path, "Please repeat after me, the parcel arrived on Monday.")
    scenario = render(tmp_path, media=stream(audio), ending=caller_bye(12000), media_port=capture.port)
    (await run_sipp(tmp_path, scenario, server.target)).check()
    (session,) = await server.wait_ended()
    heard = [e.text for e in session.conversation.transcript.entries() if e.role == "user"]
    said = [e.text for e in session.conversation.transcript.entries() if e.role == "agent"]
    assert len(heard) == 1 and "parcel arrived on monday" in heard[0].lower(), heard
    assert said and "parcel arrived on monday" in said[0].lower(), said
    # With pipeline.debug the call's per-turn timings reach the log (a SIP call has no DataChannel).
    timings = [r for r in caplog.records if r.getMessage() == "sip call timing"]
    stages = {getattr(r, "stage", "") for r in timings}
    assert {"stt", "first_audio"} <= stages, stages
    assert all(getattr(r, "call_id", "") and getattr(r, "ms", -1) >= 0 for r in timings)
    # The reply on the wire, as the caller heard it, is the Piper voice saying those words. The server's
    # Piper draws new prosody on every render and two lossy hops follow (G.711, then Whisper tiny), so
    # the words heard vary: "the parts will arrive on Monday" and "the parts will arrived on Monday" both
    # came back. What must come through is the sentence's content, not its exact words.
    reply = loud_part(capture.pcm())
    on_wire = (await whisper.transcribe(reply, 8000)).lower()
    assert "monday" in on_wire and ("parcel" in on_wire or "arriv" in on_wire), (said[0], on_wire)
    # The gateway told Piper's pool there was one call: its sentences went to the wide workers of a quiet node.
    assert isinstance(server.tts, PiperTextToSpeech)
    assert sum(slot.said for slot in server.tts.pool.slots if slot.wide) >= 1


def paused_caller(directory: Path, sentence: str, pause_ms: int) -> Path:
    """The Piper voice saying `sentence` with a pause of `pause_ms` cut in at its comma, as RAW mu-law."""
    (pcm,) = neural([sentence], 8000)
    first = fragment_before_comma(pcm, 8000)
    audio = silence(400, 8000) + first + silence(pause_ms, 8000) + pcm[len(first):] + silence(2500, 8000)
    path = directory / f"paused-{abs(hash((sentence, pause_ms))) % 10**8}.pcmu"
    path.write_bytes(ulaw_encode(audio))
    return path


def defaults_config(tmp_path: Path) -> Config:
    config = sip_calls_config(tmp_path, symmetric_rtp=False)  # our audio goes to the capture port
    config.pipeline.vad = "silero"  # the offline defaults, not the tone-driven tests' energy VAD and text rules
    config.pipeline.end_of_turn = "smart_turn"
    config.pipeline.vad_offset_ms = PipelineConfig().vad_offset_ms
    return config


def turn_outcomes(server: object) -> dict[str, int]:
    text = server.gateway.telemetry.prometheus()  # type: ignore[attr-defined]
    return {m.group(1): int(float(m.group(2)))
            for m in re.finditer(r'voicegate_turn_events_total\{[^}]*outcome="([a-z_]+)"[^}]*\} ([0-9.]+)', text)}


async def test_a_caller_who_pauses_mid_sentence_gets_one_reply_to_the_whole_sentence(
        make_server: ServerFactory, capture: RtpCapture, tmp_path: Path, whisper: WhisperSpeechToText) -> None:
    server = await make_server(stt=whisper, config=defaults_config(tmp_path))
    audio = paused_caller(tmp_path, "I'd like to book a table for, four people on Friday.", 1200)
    scenario = render(tmp_path, media=stream(audio), ending=caller_bye(12000), media_port=capture.port)
    (await run_sipp(tmp_path, scenario, server.target)).check()
    (session,) = await server.wait_ended()
    # One turn on record, the whole sentence, and one reply to it: whether the agent waited through the
    # pause, or answered the first half and dropped that reply when the caller went on.
    users = [m.content for m in session.conversation.history if m.role == "user"]
    assert len(users) == 1, users
    assert "table" in users[0].lower() and "friday" in users[0].lower(), users
    # The local agent's answer is long, so the hang-up may cut it: what counts is that there is one,
    # and that it answers the whole sentence.
    replies = [e for e in session.conversation.transcript.entries() if e.role == "agent"]
    assert len(replies) == 1 and "friday" in (replies[0].intended or replies[0].text).lower(), replies


async def test_a_reply_released_during_the_pause_never_reaches_the_wire_before_the_caller_goes_on(
        make_server: ServerFactory, capture: RtpCapture, tmp_path: Path, whisper: WhisperSpeechToText) -> None:
    config = defaults_config(tmp_path)
    config.pipeline.end_of_turn_threshold = 0.01  # every pause is a release: the first half is answered
    model = RecordingModel("Thank you, noted.", delay_s=2.0)  # ... by a model slower than the caller's pause
    server = await make_server(stt=whisper, config=config, model=model)
    audio = paused_caller(tmp_path, "Please send the parcel, to my office on Monday.", 1500)
    scenario = render(tmp_path, media=stream(audio), ending=caller_bye(13000), media_port=capture.port)
    (await run_sipp(tmp_path, scenario, server.target)).check()
    (session,) = await server.wait_ended()
    asked = [r.turn.text.lower() for r in model.requests]
    assert any("parcel" in a and "monday" not in a for a in asked), asked  # the first half was answered...
    assert "parcel" in asked[-1] and "monday" in asked[-1], asked  # ... and then the whole sentence
    outcomes = turn_outcomes(server)
    assert outcomes.get("continued_before_reply", 0) >= 1 and not outcomes.get("continued_after_reply_heard"), outcomes
    agent = [e for e in session.conversation.transcript.entries() if e.role == "agent"]
    assert [e.text for e in agent] == ["Thank you, noted."] and not agent[0].interrupted
    users = [m.content.lower() for m in session.conversation.history if m.role == "user"]
    assert len(users) == 1 and "parcel" in users[0] and "monday" in users[0], users
    # On the wire: the reply once, the dropped one not at all.
    on_wire = (await whisper.transcribe(loud_part(capture.pcm()), 8000)).lower()
    assert on_wire.count("thank") == 1, on_wire


@pytest.mark.parametrize("greeting", ["Good morning.", "Hello."])
async def test_a_short_greeting_is_answered_on_the_verdict_not_after_the_longest_hold(
        make_server: ServerFactory, tmp_path: Path, whisper: WhisperSpeechToText, greeting: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """Read from why the turn was released (the `release` event, logged for a SIP call, and its metric),
    not from a timing: a loaded test machine may be slow, but the reason does not change."""
    caplog.set_level("INFO", logger="voicegate.internal.sip.voice")
    server = await make_server(stt=whisper, config=defaults_config(tmp_path))
    scenario = render(tmp_path, media=stream(neural_caller(tmp_path, greeting)), ending=caller_bye(7000))
    (await run_sipp(tmp_path, scenario, server.target)).check()
    (session,) = await server.wait_ended()
    users = [m.content for m in session.conversation.history if m.role == "user"]
    assert len(users) == 1, users
    releases = [getattr(r, "detail", {}) for r in caplog.records if r.getMessage() == "sip call release"]
    assert [r["reason"] for r in releases] == ["verdict"], releases
    assert turn_outcomes(server).get("released_verdict") == 1
    assert not turn_outcomes(server).get("released_hold")


async def test_on_a_phone_line_the_recognisers_head_judges_the_turn_and_smart_turn_is_not_run(
        make_server: ServerFactory, tmp_path: Path, whisper: WhisperSpeechToText,
        caplog: pytest.LogCaptureFixture) -> None:
    """A finished statement over G.711: Whisper's phone-band head scores it in the decode itself."""
    caplog.set_level("INFO", logger="voicegate.internal.sip.voice")
    server = await make_server(stt=whisper, config=defaults_config(tmp_path))
    turn_model = server.gateway.services.turn_model
    asked_before = turn_model.inferences
    caller = neural_caller(tmp_path, "I want to report a broken street light.")
    scenario = render(tmp_path, media=stream(caller), ending=caller_bye(8000))
    (await run_sipp(tmp_path, scenario, server.target)).check()
    (session,) = await server.wait_ended()
    users = [m.content for m in session.conversation.history if m.role == "user"]
    assert len(users) == 1 and "street light" in users[0].lower(), users
    releases = [getattr(r, "detail", {}) for r in caplog.records if r.getMessage() == "sip call release"]
    assert [r["reason"] for r in releases] == ["verdict"], releases  # finished, by the sound and the words
    assert turn_model.inferences == asked_before  # Smart Turn never ran for this call


async def test_a_cough_over_the_agent_on_a_phone_call_pauses_it_and_it_resumes_its_sentence(
        make_server: ServerFactory, capture: RtpCapture, tmp_path: Path, whisper: WhisperSpeechToText,
        caplog: pytest.LogCaptureFixture) -> None:
    """A coughing fit over the greeting: the agent pauses, Whisper finds no words in it, the greeting
    picks its sentence up again from the start and plays to its end; the call log and the metrics say so."""
    caplog.set_level("INFO", logger="voicegate.internal.sip.voice")
    config = defaults_config(tmp_path)
    config.pipeline.greeting = ("Thank you for calling the branch office. Our opening hours are nine to six on "
                                "weekdays and ten to four on Saturdays. How can I help you today?")
    config.pipeline.vad = "energy"  # the cough surely counts as sound (Silero's verdict on a cough varies)
    config.pipeline.barge_in_confirm_ms = 200  # ... and pauses the agent
    model = RecordingModel("It is three o'clock.")
    server = await make_server(stt=whisper, config=config, model=model)
    audio = tmp_path / "cough.pcmu"
    audio.write_bytes(ulaw_encode(silence(3000, 8000) + cough(8000) + silence(3000, 8000)))
    scenario = render(tmp_path, media=stream(audio), ending=caller_bye(30000), media_port=capture.port)
    (await run_sipp(tmp_path, scenario, server.target)).check()
    (session,) = await server.wait_ended()
    assert turn_outcomes(server).get("resumed", 0) >= 1
    logged = [getattr(r, "detail", {}) for r in caplog.records if r.getMessage() == "sip call overlap"]
    assert [d for d in logged if d.get("action") == "resumed" and d.get("kind") == "non_speech"], logged
    assert not model.requests  # no turn
    said = [e for e in session.conversation.transcript.entries() if e.role == "agent"]
    assert [e.text for e in said] == [config.pipeline.greeting] and not said[0].interrupted, said
