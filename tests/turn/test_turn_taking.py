"""Turn-taking on the defaults (Silero VAD, Smart Turn, Whisper) with a neural voice over the phone.

A finished question is released on the model's verdict, not after the silence rules' wait; a caller who
pauses inside a phone number is one turn; "okay" over the agent in noise does not cut it off, while a
real interruption in the same noise does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from tests.fakes.models import RecordingModel
from tests.pipeline.conftest import PipelineFactory
from tests.speech import neural, neural_telephone, silence, telephone
from tests.turn.test_turn_models import fragment_before_comma, phone
from voicegate.internal.pipeline.events import ReleaseEvent, ResponseEvent, TimingEvent, TranscriptEvent
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.internal.stt.whisper import WhisperSpeechToText

DEFAULTS = {"vad": "silero", "end_of_turn": "smart_turn"}  # the pipeline fixture pins the older ones

pytestmark = pytest.mark.slow
RATE = 8000
LONG_REPLY = ("Our opening hours are nine in the morning to six in the evening on weekdays, and ten to four on "
              "Saturdays. On Sundays we are closed, but you can always write to us through the website.")


def noise_level(pcm: bytes, snr_db: float = 10.0) -> float:
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    return float(np.sqrt(np.mean(samples[np.abs(samples) > 300] ** 2))) / 10 ** (snr_db / 20)


def noisy(pcm: bytes, level: float, rng: np.random.Generator) -> bytes:
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    noise = rng.normal(0.0, level, samples.size)
    return np.clip(samples + noise, -32768, 32767).astype(np.int16).tobytes()


def user_finals(events: Sequence[object]) -> list[str]:
    return [e.text for e in events if isinstance(e, TranscriptEvent) and e.role == "user" and e.final]


@pytest.mark.parametrize("head", ["always", "off"])
@pytest.mark.asyncio(loop_scope="module")
async def test_a_finished_question_is_released_on_the_models_verdict(
        make_pipeline: PipelineFactory, whisper: WhisperSpeechToText, head: str) -> None:
    """On a phone line Whisper's phone-band head judges the sound in the decode (`phone_turn_head` auto);
    off, Smart Turn is asked when the speech stops."""
    pipeline, sink = make_pipeline(stt=whisper, model=RecordingModel("Okay."), rate=RATE,
                                   user_speech_quiet_ms=5000,  # the silence rules alone would wait 5 s
                                   phone_turn_head=head, **DEFAULTS)
    async with LocalCall(pipeline) as call:
        call.say(silence(300, RATE) + neural_telephone("Could you tell me where my parcel is?") + silence(3000, RATE))
        await call.wait_caller_done()
        await call.wait_agent_quiet(300, timeout_s=30)
    assert [t.lower().rstrip("?.") for t in user_finals(sink.events)] == ["could you tell me where my parcel is"]
    releases = [e for e in sink.events if isinstance(e, ReleaseEvent)]
    if head == "always":  # the head hears it finished: answered at once (Smart Turn's fusion held it 2.3 s here)
        probability = pipeline.turn.probability
        assert probability is not None and probability >= pipeline.config.phone_turn_threshold
        assert [e.reason for e in releases] == ["verdict"], releases
    waits = [e.ms for e in sink.events if isinstance(e, TimingEvent) and e.stage == "end_of_turn"]
    assert len(waits) == 1 and waits[0] < 3000, waits  # well inside the 5 s quiet window and max_turn_wait
    smart_turn_asked = [e for e in sink.events if isinstance(e, TimingEvent) and e.stage == "end_of_turn_model"]
    assert bool(smart_turn_asked) == (head == "off")


@pytest.mark.asyncio(loop_scope="module")
async def test_a_pause_inside_a_phone_number_is_one_turn(
        make_pipeline: PipelineFactory, whisper: WhisperSpeechToText) -> None:
    (number,) = neural(["My phone number is five five five, one two three, four five six seven."])
    first = fragment_before_comma(number)
    paused = phone(first + silence(1000, 16000) + number[len(first):])
    pipeline, sink = make_pipeline(stt=whisper, model=RecordingModel("Thank you."), rate=RATE, **DEFAULTS)
    async with LocalCall(pipeline) as call:
        call.say(silence(300, RATE) + paused + silence(4000, RATE))
        await call.wait_caller_done()
        await call.wait_agent_quiet(300, timeout_s=30)
    turns = [e for e in sink.events if isinstance(e, ResponseEvent)]
    assert len(turns) == 1, user_finals(sink.events)
    assert len(user_finals(sink.events)) >= 2  # more than one utterance, merged into the one turn


async def agent_speaking_then(make_pipeline: PipelineFactory, whisper: WhisperSpeechToText,
                              caller_line: str) -> Sequence[object]:
    """Ask a question; one second into the long reply, say `caller_line`; all in white noise (10 dB SNR).

    The line waits for the reply to be heard rather than for a fixed time: on a loaded machine the
    reply can start seconds late, and a line said before it would be a new turn, not a backchannel.
    """
    pipeline, sink = make_pipeline(stt=whisper, model=RecordingModel(LONG_REPLY), rate=RATE, **DEFAULTS)
    question = neural_telephone("Can you tell me about your opening hours?")
    level, rng = noise_level(question), np.random.default_rng(7)
    async with LocalCall(pipeline) as call:
        call.say(noisy(silence(300, RATE) + question, level, rng))
        waited = 0
        while call.agent_frames < 50:  # the noise goes on until the agent has spoken for a second
            if waited > 40 * 50:
                raise TimeoutError("the agent did not answer the question")
            if call.queued_ms < 60:  # never a gap of digital silence in the noise
                call.say(noisy(silence(100, RATE), level, rng))
            await call.ticks_later(1)
            waited += 1
        call.say(noisy(neural_telephone(caller_line) + silence(4000, RATE), level, rng))
        await call.wait_caller_done()
        await call.wait_agent_quiet(300, timeout_s=40)
    return sink.events


@pytest.mark.asyncio(loop_scope="module")
async def test_a_backchannel_in_noise_does_not_interrupt_the_agent(
        make_pipeline: PipelineFactory, whisper: WhisperSpeechToText) -> None:
    events = await agent_speaking_then(make_pipeline, whisper, "Okay.")
    replies = [e for e in events if isinstance(e, ResponseEvent)]
    assert replies and not any(e.interrupted for e in replies), [(e.text, e.interrupted) for e in replies]


@pytest.mark.asyncio(loop_scope="module")
async def test_a_real_interruption_in_the_same_noise_does(
        make_pipeline: PipelineFactory, whisper: WhisperSpeechToText) -> None:
    events = await agent_speaking_then(make_pipeline, whisper, "Wait, stop, I need to change the date.")
    assert any(isinstance(e, ResponseEvent) and e.interrupted for e in events)


async def said_over_the_agent(make_pipeline: PipelineFactory, whisper: WhisperSpeechToText, caller_line: str,
                              after_ms: int = 3000, voice: Callable[[str], bytes] = neural_telephone,
                              ) -> tuple[Sequence[object], RecordingModel]:
    """Ask a question; once `after_ms` of the long reply have played (by default past
    `continuation_window_ms`, so the line is said over the agent, not taken as the rest of the question),
    say `caller_line` in `voice`."""
    model = RecordingModel(LONG_REPLY)
    pipeline, sink = make_pipeline(stt=whisper, model=model, rate=RATE, **DEFAULTS)
    async with LocalCall(pipeline) as call:
        call.say(silence(300, RATE) + neural_telephone("Can you tell me about your opening hours?"))
        waited = 0
        while call.agent_frames < after_ms // 20:
            if waited > 60 * 50:
                raise TimeoutError("the agent did not answer the question")
            if call.queued_ms < 60:
                call.say(silence(100, RATE))
            await call.ticks_later(1)
            waited += 1
        call.say(voice(caller_line) + silence(4000, RATE))
        await call.wait_caller_done()
        await call.wait_agent_quiet(300, timeout_s=40)
    return sink.events, model


# A repeated acknowledgement. Whisper wrote Piper's "Mm-hmm, mm-hmm." here as "Mm-m-m-m-m-m-m" and "Mmm, mmm." as
# "MMMMMMM": a content word and "more than an acknowledgement", which stopped the agent and, 2.3 s later,
# released the hum as the caller's turn (`hold`) and answered it. "Yeah, yeah." came back as written.
@pytest.mark.parametrize("line", ["Mm-hmm, mm-hmm.", "Mmm, mmm.", "Yeah, yeah."])
@pytest.mark.asyncio(loop_scope="module")
async def test_a_repeated_acknowledgement_over_the_agent_is_no_turn(
        make_pipeline: PipelineFactory, whisper: WhisperSpeechToText, line: str) -> None:
    events, model = await said_over_the_agent(make_pipeline, whisper, line)
    replies = [(e.text, e.interrupted) for e in events if isinstance(e, ResponseEvent)]
    assert replies == [(LONG_REPLY, False)], replies  # the agent played on to its end
    assert len(user_finals(events)) >= 2, user_finals(events)  # the acknowledgement was heard ...
    assert len(model.requests) == 1  # ... and not answered
    assert len([e for e in events if isinstance(e, ReleaseEvent)]) == 1, user_finals(events)


@pytest.mark.asyncio(loop_scope="module")
async def test_a_repeated_acknowledgement_as_the_reply_begins_is_no_turn(
        make_pipeline: PipelineFactory, whisper: WhisperSpeechToText) -> None:
    """espeak-ng's "Yes, yes." one second into the reply: "Yes," holds the reply (the caller may be going on
    with the question), "yes." begins after `continuation_window_ms` and was judged apart, as words over a
    silent agent: the reply stopped and the question was answered again, "yes, yes" and all."""
    events, model = await said_over_the_agent(make_pipeline, whisper, "Yes, yes.", after_ms=1000, voice=telephone)
    replies = [(e.text, e.interrupted) for e in events if isinstance(e, ResponseEvent)]
    assert replies == [(LONG_REPLY, False)], replies
    assert len(model.requests) == 1, user_finals(events)


@pytest.mark.asyncio(loop_scope="module")
async def test_a_repeated_acknowledgement_with_more_words_still_takes_the_turn(
        make_pipeline: PipelineFactory, whisper: WhisperSpeechToText) -> None:
    events, model = await said_over_the_agent(make_pipeline, whisper, "Yeah, yeah, but wait, are you open on Sunday?")
    assert any(isinstance(e, ResponseEvent) and e.interrupted for e in events)
    assert len(model.requests) == 2, user_finals(events)  # answered


def test_fragment_helper_cuts_before_the_first_pause(tmp_path: Path) -> None:
    (number,) = neural(["My phone number is five five five, one two three."])
    first = fragment_before_comma(number)
    assert 0.25 * len(number) < len(first) < 0.75 * len(number)
