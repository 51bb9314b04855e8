"""Real people on the phone: recordings of human voices (tests/human_speech.py) over SIP on the offline defaults.

Every other call test speaks with a synthesiser, whose timing and pitch the turn models were tuned on. Here a
person finishes a sentence, pauses after a lead-in and a comma, talks over the agent, and does it again with
other people talking behind them. What is checked is why each turn was released (the `sip call release` log
and its metric), not how long it took: a loaded machine may be slow, but the reason does not change.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.common.noises import active_level_db
from bench.turns.cases import channel, quietest_near
from bench.turns.human import room_tone
from tests.human_speech import clip
from tests.sip_calls.conftest import ServerFactory, caller_bye, render, run_sipp, stream
from tests.sip_calls.test_whisper_calls import defaults_config, turn_outcomes
from tests.speech import silence
from tests.turn.test_noise_gate import babble
from voicegate.internal.audio.g711 import ulaw_encode
from voicegate.internal.audio.resample import resample
from voicegate.internal.stt.whisper import WhisperSpeechToText

pytestmark = pytest.mark.slow


def phone(pcm16k: bytes) -> bytes:
    return resample(pcm16k, 16000, 8000)


def caller_file(directory: Path, name: str, pcm8k: bytes) -> Path:
    path = directory / f"{name}.pcmu"
    path.write_bytes(ulaw_encode(pcm8k))
    return path


def releases(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [getattr(r, "detail", {}) for r in caplog.records if r.getMessage() == "sip call release"]


# Three people who finished a sentence (three speakers of the dev split). One clip alone sits near the
# verdict's threshold on some machines: "Go forward ten meters." is written with its full stop by Whisper
# on Intel's MKL and without it on AMD's oneDNN int8 kernels (fused P 0.78 against 0.61 at the line's
# 22 dB), so the claim is held over the three, as the turn benchmark holds it over many.
FINISHED = ("goforward", "librivox-0880", "forever-2")


async def test_people_who_finished_are_answered_on_the_verdict_not_after_the_longest_hold(
        make_server: ServerFactory, tmp_path: Path, whisper: WhisperSpeechToText,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="voicegate.internal.sip.voice")
    reasons: dict[str, list[object]] = {}
    for name in FINISHED:
        caplog.clear()
        server = await make_server(stt=whisper, config=defaults_config(tmp_path / name))
        person = clip(name)
        audio = caller_file(tmp_path, name, silence(400, 8000) + phone(person.pcm16k) + silence(3000, 8000))
        ending = caller_bye(int(len(person.pcm16k) / 32) + 6000)
        (await run_sipp(tmp_path, render(tmp_path, media=stream(audio), ending=ending), server.target)).check()
        (session,) = await server.wait_ended()
        users = [m.content for m in session.conversation.history if m.role == "user"]
        assert len(users) == 1, (name, users)  # one turn, answered once
        reasons[name] = [r["reason"] for r in releases(caplog)]
        assert reasons[name] and reasons[name][0] in ("verdict", "hold"), (name, releases(caplog))
    answered_on_verdict = [name for name, said in reasons.items() if said == ["verdict"]]
    assert len(answered_on_verdict) >= len(FINISHED) - 1, reasons


async def test_a_person_pausing_after_a_lead_in_and_a_comma_is_answered_once_for_the_whole_sentence(
        make_server: ServerFactory, tmp_path: Path, whisper: WhisperSpeechToText) -> None:
    """"He turned sharply, | and faced Gregson across the table." with 1.2 s of the recording's own room tone
    cut in at the comma: the agent neither answers "He turned sharply" nor talks over the rest."""
    server = await make_server(stt=whisper, config=defaults_config(tmp_path))
    person = clip("arctic-a0009").pcm16k
    cut = quietest_near(person, 0.4)  # the comma's gap after "sharply" (0.9-1.4 s into this recording)
    spliced = person[:cut] + room_tone(person, 1.2) + person[cut:]
    audio = caller_file(tmp_path, "lead-in", silence(400, 8000) + phone(spliced) + silence(3000, 8000))
    (await run_sipp(tmp_path, render(tmp_path, media=stream(audio), ending=caller_bye(11000)),
                    server.target)).check()
    (session,) = await server.wait_ended()
    users = [m.content.lower() for m in session.conversation.history if m.role == "user"]
    assert len(users) == 1, users
    assert "sharply" in users[0] and "table" in users[0], users
    assert not turn_outcomes(server).get("continued_after_reply_heard")  # the caller never heard the agent early


async def test_a_person_talking_over_the_agent_is_answered_through_the_verdict(
        make_server: ServerFactory, tmp_path: Path, whisper: WhisperSpeechToText,
        caplog: pytest.LogCaptureFixture) -> None:
    """An interruption is a turn like any other: the agent stops, and the caller's words are released on the
    end-of-turn verdict, not after the longest hold (which is what an interruption waited before)."""
    caplog.set_level("INFO", logger="voicegate.internal.sip.voice")
    config = defaults_config(tmp_path)
    config.pipeline.greeting = ("Thank you for calling the branch office. Our opening hours are nine to six on "
                                "weekdays and ten to four on Saturdays, and on Sundays we are closed, but you can "
                                "always leave a message.")
    server = await make_server(stt=whisper, config=config)
    person = clip("goforward").pcm16k
    audio = caller_file(tmp_path, "over", silence(3000, 8000) + phone(person) + silence(4000, 8000))
    (await run_sipp(tmp_path, render(tmp_path, media=stream(audio), ending=caller_bye(10000)),
                    server.target)).check()
    (session,) = await server.wait_ended()
    users = [m.content.lower() for m in session.conversation.history if m.role == "user"]
    assert len(users) == 1 and "forward" in users[0], users
    greeting = next(e for e in session.conversation.transcript.entries() if e.role == "agent")
    assert greeting.interrupted  # the agent stopped for them
    assert [r["reason"] for r in releases(caplog)] == ["verdict"], releases(caplog)


async def test_other_people_talking_behind_the_caller_do_not_keep_a_finished_turn_open(
        make_server: ServerFactory, tmp_path: Path, whisper: WhisperSpeechToText) -> None:
    """Four voices summed, 15 dB below the caller, for the whole call (a cafe, a TV): the caller's finished
    turn is answered while the voices go on (they held the turn open for good before)."""
    server = await make_server(stt=whisper, config=defaults_config(tmp_path))
    person = clip("goforward").pcm16k
    caller = np.concatenate([np.zeros(16000 * 2), np.frombuffer(person, dtype=np.int16).astype(np.float64),
                             np.zeros(16000 * 6)])
    behind = babble(caller.size)
    behind *= 10 ** ((active_level_db(np.frombuffer(person, dtype=np.int16).astype(np.float64)) - 15.0) / 20) / \
        np.sqrt(np.mean(behind ** 2))
    line = channel(np.clip(np.rint(caller + behind), -32768, 32767).astype(np.int16).tobytes(), 8000)
    audio = caller_file(tmp_path, "babble", line)
    (await run_sipp(tmp_path, render(tmp_path, media=stream(audio), ending=caller_bye(9500)),
                    server.target)).check()
    (session,) = await server.wait_ended()
    users = [m.content.lower() for m in session.conversation.history if m.role == "user"]
    assert any("forward" in u for u in users), users  # answered while the voices went on
    agent = [e for e in session.conversation.transcript.entries() if e.role == "agent"]
    assert agent, "no reply while the voices behind went on"
