"""The voice pipeline end to end: real espeak-ng audio in, real replies out, barge-in, turns, failures."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from tests.fakes.models import RecordingModel
from tests.fakes.openai_fake import FakeOpenAI
from tests.pipeline.conftest import PipelineFactory, ScriptedStt
from tests.speech import active_ms, silence, speak, telephone, tone, transcribe
from voicegate.internal.config import Config
from voicegate.internal.llm.base import ChatRequest, LlmError, ReplyDelta, ToolCall
from voicegate.internal.llm.openai import OpenAIChatModel
from voicegate.internal.pipeline.events import ResponseEvent, StateEvent, TimingEvent, TranscriptEvent
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.internal.pipeline.pipeline import APOLOGY
from voicegate.internal.stt.base import Transcript
from voicegate.internal.stt.pocketsphinx import PocketsphinxSpeechToText

pytestmark = pytest.mark.slow

CALLER_PHRASES = ["my name is sam", "what time is it", "say hello world", "goodbye", "i want to book a table"]


class FailingModel(RecordingModel):
    def __init__(self, error: Exception | None = None, hang: bool = False) -> None:
        super().__init__()
        self.error = error
        self.hang = hang

    async def stream(self, request: ChatRequest) -> AsyncIterator[ReplyDelta | ToolCall]:
        self.requests.append(request)
        if self.hang:
            await asyncio.sleep(3600)
        raise self.error or LlmError("upstream said 500")
        yield ReplyDelta("")  # pragma: no cover - makes this an async generator


def agent_texts(sink_events: list) -> list[str]:
    return [e.text for e in sink_events if isinstance(e, TranscriptEvent) and e.role == "agent"]


@pytest.fixture
async def pocketsphinx() -> AsyncIterator[PocketsphinxSpeechToText]:
    from voicegate.internal.config.providers import PocketsphinxConfig

    engine = PocketsphinxSpeechToText(PocketsphinxConfig(phrases=CALLER_PHRASES, workers=1))
    await engine.warm_up()
    yield engine
    await engine.aclose()


async def test_espeak_caller_is_understood_and_answered_with_audible_words(
        make_pipeline: PipelineFactory, pocketsphinx: PocketsphinxSpeechToText) -> None:
    pipeline, sink = make_pipeline(stt=pocketsphinx)
    async with LocalCall(pipeline) as call:
        call.say(silence(300) + speak("say hello world") + silence(200))
        await call.wait_caller_done()
        await call.wait_agent_quiet(800)
    users = [e.text for e in sink.events if isinstance(e, TranscriptEvent) and e.role == "user" and e.final]
    assert users and "hello world" in users[0]
    assert agent_texts(sink.events) == ["Hello world."]
    reply_audio = bytes(call.agent_audio)
    assert active_ms(reply_audio, 16000) > 300  # the reply is audible, not silence
    assert "hello world" in transcribe(reply_audio, 16000, ["hello world", "goodbye", "what time is it"])
    timings = {e.stage for e in sink.events if isinstance(e, TimingEvent)}
    assert {"stt", "first_audio", "tts_first_audio"} <= timings
    states = [e.state for e in sink.events if isinstance(e, StateEvent)]
    assert states[:3] == ["thinking", "speaking", "listening"]


async def test_a_decode_depends_on_its_own_audio_not_on_what_came_before(
        pocketsphinx: PocketsphinxSpeechToText) -> None:
    # The decoder adapts its noise and cepstral-mean estimates as it goes; the same words used to decode
    # differently after a warm-up on silence than after speech ("say hello world" came out empty).
    contexts = [silence(2000), speak("i want to book a table") * 3, tone(1500, level_dbfs=-30.0)]
    for rate in (16000, 8000):
        for phrase in CALLER_PHRASES:
            utterance = silence(200, rate) + speak(phrase, rate) + silence(150, rate)
            heard = set()
            for context in contexts:
                await pocketsphinx.transcribe(context, 16000)
                heard.add(await pocketsphinx.transcribe(utterance, rate))
            assert len(heard) == 1, f"{phrase!r} at {rate} Hz decoded as {heard}"


ORPHAN_SCRIPT = """
import asyncio, time
from voicegate.internal.config.providers import PocketsphinxConfig
from voicegate.internal.stt.pocketsphinx import PocketsphinxSpeechToText

async def main():
    engine = PocketsphinxSpeechToText(PocketsphinxConfig(phrases=["hello"], workers=1))
    await engine.warm_up()
    print(" ".join(str(pid) for pid in engine.pool.worker_pids()), flush=True)
    time.sleep(600)

if __name__ == "__main__":
    asyncio.run(main())
"""


async def test_decoder_workers_exit_when_the_server_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "server.py"
    script.write_text(ORPHAN_SCRIPT)
    server = await asyncio.create_subprocess_exec(sys.executable, str(script), stdout=asyncio.subprocess.PIPE,
                                                  cwd=Path(__file__).resolve().parents[2])
    assert server.stdout is not None
    workers = [int(pid) for pid in (await asyncio.wait_for(server.stdout.readline(), 120)).split()]
    assert workers and all(psutil.pid_exists(pid) for pid in workers)
    server.kill()  # no shutdown: the pool never tells its workers to stop
    deadline = time.monotonic() + 30
    try:
        while any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                  for pid in workers):
            assert time.monotonic() < deadline, "decoder workers outlived the server"
            await asyncio.sleep(0.2)
    finally:
        for pid in workers:  # a failed run must not leave them behind either
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
    await server.wait()  # returns once the workers, which share its stdout, are gone


async def test_telephone_rate_pipeline_works_at_8khz(make_pipeline: PipelineFactory,
                                                    pocketsphinx: PocketsphinxSpeechToText) -> None:
    pipeline, sink = make_pipeline(stt=pocketsphinx, rate=8000)
    async with LocalCall(pipeline) as call:
        call.say(silence(300, 8000) + telephone("say hello world") + silence(200, 8000))
        await call.wait_caller_done()
        await call.wait_agent_quiet(800)
    assert agent_texts(sink.events) == ["Hello world."]
    assert "hello world" in transcribe(bytes(call.agent_audio), 8000, ["hello world", "goodbye"])


async def test_goodbye_ends_the_call_after_the_farewell(make_pipeline: PipelineFactory,
                                                       pocketsphinx: PocketsphinxSpeechToText) -> None:
    pipeline, sink = make_pipeline(stt=pocketsphinx)
    ended = asyncio.Event()

    async def hangup() -> None:
        ended.set()

    pipeline.session.hangup = hangup
    async with LocalCall(pipeline) as call:
        call.say(silence(200) + speak("goodbye") + silence(200))
        await asyncio.wait_for(ended.wait(), 30)
    assert agent_texts(sink.events)[-1].startswith("Goodbye")


async def test_consecutive_finals_are_merged_into_one_turn(make_pipeline: PipelineFactory) -> None:
    stt = ScriptedStt(["I want to", "book a table"])
    model = RecordingModel("Sure.")
    pipeline, _sink = make_pipeline(stt=stt, model=model, turn_merge_ms=350, user_speech_quiet_ms=300)
    async with LocalCall(pipeline) as call:
        call.say(silence(200) + tone(500) + silence(450) + tone(500) + silence(100))
        await call.wait_caller_done()
        await call.wait_agent_quiet(600)
    assert len(stt.utterances) == 2
    assert [r.turn.text for r in model.requests] == ["I want to book a table"]
    assert [m.content for m in model.requests[0].messages if m.role == "user"] == ["I want to book a table"]


async def test_a_superseded_fragment_is_neither_shown_nor_answered_with_a_request_to_repeat(
        make_pipeline: PipelineFactory) -> None:
    # On a busy node the first half's decode was withdrawn: the turn's next decode holds its words too.
    stt = ScriptedStt([Transcript("", True, whole_turn=True, superseded=True),
                       Transcript("I want to book a table", True, whole_turn=True)])
    model = RecordingModel("Sure.")
    pipeline, sink = make_pipeline(stt=stt, model=model, turn_merge_ms=350, user_speech_quiet_ms=300)
    async with LocalCall(pipeline) as call:
        call.say(silence(200) + tone(600) + silence(450) + tone(500) + silence(100))
        await call.wait_caller_done()
        await call.wait_agent_quiet(600)
    assert len(stt.utterances) == 2
    assert [r.turn.text for r in model.requests] == ["I want to book a table"]
    assert [e.text for e in sink.events if isinstance(e, TranscriptEvent)] == ["I want to book a table", "Sure."]


async def test_barge_in_stops_playback_within_a_frame_and_cancels_the_model_request(
        make_pipeline: PipelineFactory, config: Config) -> None:
    long_reply = " ".join(f"This is sentence number {n} of a very long answer." for n in range(1, 40))
    async with FakeOpenAI() as fake:
        fake.script_reply(long_reply)
        fake.chunk_delay_s = 0.05  # still streaming when the caller cuts in
        model = OpenAIChatModel(config.openai, base_url=fake.url + "/v1", api_key="test")
        stt = ScriptedStt(["tell me everything", "stop talking please"])
        pipeline, sink = make_pipeline(stt=stt, model=model, barge_in_confirm_ms=300)
        async with LocalCall(pipeline) as call:
            call.say(silence(200) + tone(400) + silence(100))
            while not any(isinstance(e, StateEvent) and e.state == "speaking" for e in sink.events):
                await call.ticks_later(1)
            await call.ticks_later(40)  # the agent has been talking for 0.8 s
            assert pipeline.agent_active
            start_tick = call.ticks
            call.say(tone(1200, level_dbfs=-15))
            await call.wait_caller_done()
            await call.wait_agent_quiet(300)
        await asyncio.to_thread(fake.disconnected.wait, 10)
        assert fake.disconnects >= 1, "the model request was not closed"
    frame = 640
    after = bytes(call.agent_audio[start_tick * frame:])
    # Barge-in profile onset (40 ms) + confirmation (300 ms) = 17 frames; one frame of slack for the tick
    # in which the decision is made. Everything after that must be silence until the next reply.
    cut = 2 + 15 + 1
    heard_after_cut = active_ms(after[cut * frame: (cut + 40) * frame], 16000, threshold_dbfs=-60)
    assert heard_after_cut == 0
    interrupted = [e for e in sink.events if isinstance(e, ResponseEvent) and e.interrupted]
    assert interrupted and interrupted[0].text  # what the caller heard, a prefix of the reply
    assert long_reply.startswith(interrupted[0].text.split(" number")[0])
    log = pipeline.session.conversation.transcript.entries()
    agent_entries = [e for e in log if e.role == "agent"]
    assert agent_entries[0].interrupted and agent_entries[0].intended.startswith(agent_entries[0].text[:10])
    assert len(agent_entries[0].text) < len(long_reply)


async def test_what_the_caller_heard_of_an_interrupted_reply_leaves_out_the_greeting_before_it(
        make_pipeline: PipelineFactory) -> None:
    # Found by `voicegate eval` (examples/evals/barge_in.yaml): the greeting's words came back as part of
    # the first reply the caller cut short.
    model = RecordingModel("Here is a reasonably long answer that takes a few seconds to say out loud to you.")
    stt = ScriptedStt(["tell me something", "stop right there please"])
    pipeline, sink = make_pipeline(stt=stt, model=model, greeting="Hello there.", barge_in_confirm_ms=300)
    async with LocalCall(pipeline) as call:
        while not agent_texts(sink.events):
            await call.ticks_later(1)
        asked = len(sink.events)
        call.say(silence(200) + tone(400) + silence(100))
        while not any(isinstance(e, StateEvent) and e.state == "speaking" for e in sink.events[asked:]):
            await call.ticks_later(1)
        await call.ticks_later(40)
        call.say(tone(1200, level_dbfs=-15))
        await call.wait_caller_done()
        await call.wait_agent_quiet(300)
    interrupted = [e for e in sink.events if isinstance(e, ResponseEvent) and e.interrupted]
    assert interrupted and interrupted[0].text.startswith("Here is"), interrupted
    assert "Hello there" not in interrupted[0].text


async def test_a_backchannel_ducks_but_does_not_interrupt(make_pipeline: PipelineFactory) -> None:
    model = RecordingModel("Here is a reasonably long answer that takes a few seconds to say out loud to you.")
    stt = ScriptedStt(["tell me something", "mm-hm"])
    pipeline, sink = make_pipeline(stt=stt, model=model)
    async with LocalCall(pipeline) as call:
        call.say(silence(200) + tone(400) + silence(100))
        while not any(isinstance(e, StateEvent) and e.state == "speaking" for e in sink.events):
            await call.ticks_later(1)
        await call.ticks_later(25)
        call.say(tone(200, level_dbfs=-15))  # a short "mm-hm", under the confirmation time
        await call.wait_caller_done()
        await call.wait_agent_quiet(600)
    assert not [e for e in sink.events if isinstance(e, ResponseEvent) and e.interrupted]
    assert len(model.requests) == 1  # the backchannel was not answered
    assert agent_texts(sink.events) == [model.reply]


async def test_with_barge_in_off_words_over_the_agent_are_answered_after_it_finishes(
        make_pipeline: PipelineFactory) -> None:
    model = RecordingModel("Here is a reasonably long answer that takes a few seconds to say out loud to you.")
    stt = ScriptedStt(["tell me something", "wait what about tuesday"], partials={1: "wait what"})
    pipeline, sink = make_pipeline(stt=stt, model=model, barge_in=False, barge_in_confirm_ms=300)
    async with LocalCall(pipeline) as call:
        call.say(silence(200) + tone(400) + silence(100))
        while not any(isinstance(e, StateEvent) and e.state == "speaking" for e in sink.events):
            await call.ticks_later(1)
        await call.ticks_later(40)  # heard for 0.8 s: inside continuation_window_ms, still not to be stopped
        call.say(tone(1200, level_dbfs=-15))  # long enough to stop it, were barge-in on
        await call.wait_caller_done()
        for _ in range(500):  # the first reply plays to its end, then the second is asked for
            if len(model.requests) == 2:
                break
            await call.ticks_later(1)
        await call.wait_agent_quiet(600)
    assert not [e for e in sink.events if isinstance(e, ResponseEvent) and e.interrupted]
    assert agent_texts(sink.events) == [model.reply, model.reply]  # the first reply played to its end
    assert [r.turn.text for r in model.requests] == ["tell me something", "wait what about tuesday"]
    assert not model.requests[1].turn.interrupted_text


async def test_meaningful_partial_words_interrupt_before_confirmation(make_pipeline: PipelineFactory) -> None:
    model = RecordingModel("Here is a reasonably long answer that takes a few seconds to say out loud to you.")
    stt = ScriptedStt(["tell me something", "wait what about tuesday"], partials={1: "wait what"},
                      continuous=True)
    # The caller cuts in 0.2 s after the agent began: a barge-in here, not the rest of the last sentence.
    pipeline, sink = make_pipeline(stt=stt, model=model, barge_in_confirm_ms=2000, continuation_window_ms=0)
    async with LocalCall(pipeline) as call:
        call.say(silence(200) + tone(400) + silence(100))
        while not any(isinstance(e, StateEvent) and e.state == "speaking" for e in sink.events):
            await call.ticks_later(1)
        await call.ticks_later(10)
        call.say(tone(800, level_dbfs=-15))
        await call.wait_caller_done()
        await call.wait_agent_quiet(600)
    assert [e for e in sink.events if isinstance(e, ResponseEvent) and e.interrupted]
    assert [r.turn.text for r in model.requests] == ["tell me something", "wait what about tuesday"]
    assert model.requests[1].turn.interrupted_text.startswith("Here is")


async def test_greeting_is_spoken_once_per_conversation(make_pipeline: PipelineFactory) -> None:
    pipeline, sink = make_pipeline(stt=ScriptedStt([]), greeting="Hello there.")
    async with LocalCall(pipeline, speed=8.0) as call:
        await call.wait_agent_quiet(300)
    again, sink2 = make_pipeline(stt=ScriptedStt([]), session=pipeline.session, greeting="Hello there.")
    async with LocalCall(again, speed=8.0) as call2:
        await call2.wait_agent_quiet(300)
    assert agent_texts(sink.events) == ["Hello there."]
    assert agent_texts(sink2.events) == []
    assert call2.agent_frames == 0


async def test_keypad_digits_become_a_turn_the_agent_sees(make_pipeline: PipelineFactory) -> None:
    pipeline, sink = make_pipeline(stt=ScriptedStt([]))
    async with LocalCall(pipeline, speed=8.0) as call:
        for digit in "42#":
            pipeline.push_dtmf(digit)
        await call.wait_agent_quiet(500)
    assert [e.digit for e in sink.events if e.type == "dtmf"] == ["4", "2", "#"]  # type: ignore[attr-defined]
    assert agent_texts(sink.events) == ["You pressed 4 2 #."]


async def test_rolling_summary_reaches_the_system_context_of_a_long_call(make_pipeline: PipelineFactory) -> None:
    summaries: list[str] = []

    async def summariser(system: str, script: str) -> str:
        summaries.append(script)
        return "Caller is Sam; wants a table for four on Friday."

    model = RecordingModel("Noted.")
    pipeline, _sink = make_pipeline(stt=ScriptedStt([]), model=model, summariser=summariser)
    async with LocalCall(pipeline, speed=8.0) as call:
        for n in range(40):
            pipeline.submit_text(f"Turn {n}: my name is Sam and I want a table.")
            await call.wait_agent_quiet(60)
    assert summaries and "Caller: Turn 0" in summaries[0]
    late = model.requests[-1]
    assert "Caller is Sam; wants a table for four on Friday." in late.system
    assert late.turn.summary.startswith("Caller is Sam")
    assert "Caller is Sam" not in model.requests[5].system


async def test_a_slow_summariser_never_delays_a_turn(make_pipeline: PipelineFactory) -> None:
    release = asyncio.Event()

    async def summariser(system: str, script: str) -> str:
        await release.wait()
        return "late summary"

    model = RecordingModel("Noted.")
    pipeline, _sink = make_pipeline(stt=ScriptedStt([]), model=model, summariser=summariser)
    async with LocalCall(pipeline, speed=8.0) as call:
        for n in range(30):
            started = time.monotonic()
            pipeline.submit_text(f"Turn {n}.")
            await call.wait_agent_quiet(60)
            assert time.monotonic() - started < 10
        assert pipeline.session.conversation.summary.generating
    assert len(model.requests) == 30
    release.set()


async def test_model_failure_is_apologised_for_and_the_call_goes_on(make_pipeline: PipelineFactory) -> None:
    model = FailingModel()
    pipeline, sink = make_pipeline(stt=ScriptedStt([]), model=model)
    async with LocalCall(pipeline, speed=8.0) as call:
        pipeline.submit_text("hello")
        await call.wait_agent_quiet(500)
        assert agent_texts(sink.events) == [APOLOGY]
        pipeline.session.slots.clear()
        model.error = None
    assert pipeline.session.conversation.turns == 1


async def test_a_hanging_model_times_out_into_an_apology(make_pipeline: PipelineFactory) -> None:
    pipeline, sink = make_pipeline(stt=ScriptedStt([]), model=FailingModel(hang=True), turn_timeout_s=1.0)
    async with LocalCall(pipeline, speed=8.0) as call:
        pipeline.submit_text("hello")
        await call.wait_agent_quiet(500, timeout_s=30)
    assert agent_texts(sink.events) == [APOLOGY]


async def test_empty_clipped_and_malformed_audio_never_crash_the_call(make_pipeline: PipelineFactory) -> None:
    model = RecordingModel("Okay.")
    pipeline, _sink = make_pipeline(stt=ScriptedStt(["loud noise"]), model=model)
    async with LocalCall(pipeline) as call:
        pipeline.push_audio(b"")
        pipeline.push_audio(b"\x00" * 7)
        clipped = (b"\xff\x7f" * 160 + b"\x00\x80" * 160) * 30  # full-scale square wave
        call.say(silence(300) + clipped + silence(400))
        await call.wait_caller_done()
        await call.wait_agent_quiet(500)
    assert [r.turn.text for r in model.requests] == ["loud noise"]
