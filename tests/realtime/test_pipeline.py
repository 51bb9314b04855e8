"""The Realtime agent on a call (internal/realtime/pipeline.py), through the real Gateway, against the fake
Realtime server (tests/fakes/realtime_fake.py): typed turns, the greeting, barge-in and its truncation,
function calls, keys, voicegate's own turn detection, and every way the model can fail.

`stub=True` where the words are not the point: the fake answers at once with a fixed burst of sound (its
transcript events still carry the reply's words), without Whisper or Piper.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_fake import ScriptedReply, ScriptedToolCall
from tests.fakes.realtime_fake import FakeRealtime, wait_for
from tests.realtime.conftest import KEY, GatewayFactory, open_call, realtime_config
from tests.speech import neural, silence, tone
from voicegate.internal.config.telephony import AmdConfig
from voicegate.internal.pipeline.events import ResponseEvent, TimingEvent, TranscriptEvent
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.internal.pipeline.playout import Segment
from voicegate.internal.realtime.audio import heard_ms
from voicegate.internal.realtime.connection import RealtimeConnection, RealtimeError
from voicegate.internal.realtime.replies import Ask, ModelReply, barge_in_applies, cancel_after_truncate
from voicegate.internal.telephony.answering_machine import plan_from_config, run_detection
from voicegate.internal.tools.registry import ToolContext, ToolRegistry

APOLOGY = "Sorry, I'm having trouble on my end right now."
GREETING = "Hello, you are through to Acme."


def test_the_barge_in_rules() -> None:
    assert heard_ms(0) == 0 and heard_ms(37) == 740  # the call's 20 ms frames pulled of the item
    assert barge_in_applies(agent_audible=True, barge_in=True)
    assert not barge_in_applies(agent_audible=False, barge_in=True)  # nothing to stop
    assert not barge_in_applies(agent_audible=True, barge_in=False)  # pipeline.barge_in = false
    assert cancel_after_truncate(True) and not cancel_after_truncate(False)  # only a response still running


def test_a_reply_is_played_out_once_done_and_every_frame_pulled() -> None:
    reply = ModelReply("resp_1", Ask("turn"))
    assert not reply.played_out()  # still running
    reply.running = False
    assert reply.played_out()  # done without audio (function calls only)
    reply.segment = Segment("Hello there.", frames=10, played=9, complete=True)
    assert not reply.played_out()
    reply.segment.played = 10
    assert reply.played_out()
    reply.parts = ["Hello", " there."]
    assert reply.words() == "Hello there."


async def test_a_typed_turn_is_answered_in_the_models_voice_and_both_sides_are_recorded(
        realtime_gateway: GatewayFactory) -> None:
    async with FakeRealtime(api_key=KEY) as fake:
        fake.script_reply("Your parcel arrives on Monday.")
        gateway = await realtime_gateway(fake.url, greeting="")
        gateway.config.pipeline.debug = True  # timing events on the call's sink
        call = await open_call(gateway)
        async with LocalCall(call.pipeline, speed=2.0) as live:
            await wait_for(lambda: bool(fake.sessions), what="the session.update")
            call.pipeline.submit_text("When does my parcel arrive?")
            await live.wait_agent_quiet(300)
        assert fake.received_of("conversation.item.create")[0]["item"]["content"][0]["text"] == (
            "When does my parcel arrive?")
        assert fake.said == ["Your parcel arrives on Monday."]
        # The model's audio item was played out to the caller (a few frames' slack for the resampler).
        item_ms = next(iter(fake.audio_items.values()))
        assert live.agent_frames * 20 >= item_ms - 60
        assert call.transcript() == [("user", "When does my parcel arrive?"),
                                     ("agent", "Your parcel arrives on Monday.")]
        assert call.session.conversation.turns == 1
        assert call.agent_lines() == ["Your parcel arrives on Monday."]
        responses = [(e.text, e.interrupted) for e in call.sink.events if isinstance(e, ResponseEvent)]
        assert responses == [("Your parcel arrives on Monday.", False)]  # the DataChannel's `response`
        assert [(e.stage, e.turn) for e in call.sink.events if isinstance(e, TimingEvent)] == [("first_audio", 1)]
        # The latency hook the bench reads: both directions sampled.
        assert call.pipeline.latency.inbound and call.pipeline.latency.outbound
        instructions = fake.sessions[0]
        assert instructions["audio"]["input"]["format"]["rate"] == 24000 and instructions["instructions"]


async def test_a_spoken_turn_is_heard_by_the_models_vad_and_recorded_before_its_answer(
        realtime_gateway: GatewayFactory) -> None:
    async with FakeRealtime(api_key=KEY) as fake:  # echo: "You said: <what Whisper heard>"
        gateway = await realtime_gateway(fake.url, greeting="")
        call = await open_call(gateway)
        async with LocalCall(call.pipeline) as live:
            await wait_for(lambda: bool(fake.sessions), what="the session.update")
            live.say(neural(["What time do you open on Sunday?"])[0] + silence(200))
            await wait_for(lambda: bool(fake.said), timeout=120, what="the answer")
            await live.wait_agent_quiet(300)
        heard = fake.heard[0]
        assert "sunday" in heard.lower()
        assert call.transcript() == [("user", heard), ("agent", f"You said: {heard}")]
        users = [e.text for e in call.sink.events if isinstance(e, TranscriptEvent) and e.role == "user"]
        assert users == [heard]
        assert call.session.conversation.turns == 1


async def test_the_greeting_is_said_by_the_model_at_the_calls_rate(realtime_gateway: GatewayFactory) -> None:
    async with FakeRealtime(api_key=KEY, stub=True, stub_ms=600) as fake:
        gateway = await realtime_gateway(fake.url, greeting=GREETING)
        for rate in (8000, 48000):  # a SIP call and a WebRTC call
            call = await open_call(gateway, rate)
            async with LocalCall(call.pipeline, speed=4.0) as live:
                await wait_for(lambda: bool(fake.said), what="the greeting")
                await live.wait_agent_quiet(300)
            assert GREETING in fake.received_of("response.create")[-1]["response"]["instructions"]
            assert fake.said[-1] == GREETING
            assert call.transcript() == [("agent", GREETING)]
            assert 600 - 60 <= live.agent_frames * 20 <= 600 + 60  # the burst, resampled to the call's rate


async def test_barge_in_clears_playout_and_truncates_the_item_at_what_the_caller_heard(
        realtime_gateway: GatewayFactory) -> None:
    async with FakeRealtime(api_key=KEY, stub=True, stub_ms=6000) as fake:
        gateway = await realtime_gateway(fake.url, greeting="")
        call = await open_call(gateway)
        async with LocalCall(call.pipeline, speed=2.0) as live:
            await wait_for(lambda: bool(fake.sessions), what="the session.update")
            call.pipeline.submit_text("Tell me a long story")
            await wait_for(lambda: live.agent_frames >= 100, what="2 s of the reply played")
            live.say(tone(800))
            await wait_for(lambda: bool(fake.truncations), what="the truncation")
            pulled = live.agent_frames
            await live.ticks_later(5)
            assert live.agent_frames == pulled  # the playout was cleared before the truncation went out
        truncation = fake.truncations[0]
        assert truncation.item_id in fake.audio_items and truncation.content_index == 0
        assert abs(truncation.audio_end_ms - pulled * 20) <= 40
        assert truncation.audio_end_ms < fake.audio_items[truncation.item_id]
        entries = call.session.conversation.transcript.entries()
        assert [entry.role for entry in entries[:2]] == ["user", "agent"]
        # What the caller heard of it (the words in proportion to the audio played), and all it meant to say.
        assert entries[1].interrupted and entries[1].intended == "You said: Tell me a long story"
        assert entries[1].text and "You said: Tell me a long story".startswith(entries[1].text)
        assert len(entries[1].text) < len(entries[1].intended)
        responses = [(e.text, e.interrupted) for e in call.sink.events if isinstance(e, ResponseEvent)]
        assert responses[0] == (entries[1].text, True)


def notes_tool(notes: list[str]) -> ToolRegistry:
    tools = ToolRegistry()

    async def add_note(arguments: dict[str, Any], context: ToolContext) -> str:
        notes.append(str(arguments.get("text")))
        return f"noted {arguments.get('text')}"

    tools.register("add_note", "Keep a note for the caller.",
                   {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}, add_note)
    return tools


async def test_a_tool_that_becomes_available_mid_call_is_offered_at_the_next_idle_point(
        realtime_gateway: GatewayFactory) -> None:
    up = False  # an MCP server down when the call started, back later: the cascade offers it from then on
    tools = notes_tool([])
    tools.register("lookup", "Look an order up.", {"type": "object", "properties": {}}, notes_handler,
                   available=lambda context: up)
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        gateway = await realtime_gateway(fake.url, tools=tools, greeting="")
        call = await open_call(gateway)
        async with LocalCall(call.pipeline, speed=4.0):
            await wait_for(lambda: bool(fake.sessions), what="the session.update")
            assert "lookup" not in [tool["name"] for tool in fake.sessions[0]["tools"]]
            up = True
            await wait_for(lambda: any("lookup" in [tool["name"] for tool in session.get("tools", [])]
                                       for session in fake.sessions[1:]), what="the tools' update")
        assert len(fake.connections) == 1
        update = next(session for session in fake.sessions[1:] if "tools" in session)
        assert "instructions" not in update and "audio" not in update  # only what changed


async def notes_handler(arguments: dict[str, Any], context: ToolContext) -> str:
    return "no such order"


async def test_two_function_calls_in_one_response_give_one_follow_up(realtime_gateway: GatewayFactory) -> None:
    notes: list[str] = []
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        fake.script(ScriptedReply(tool_calls=[ScriptedToolCall("add_note", '{"text": "milk"}', "call_1"),
                                              ScriptedToolCall("add_note", '{"text": "eggs"}', "call_2")]))
        fake.script_reply("I noted milk and eggs.")
        gateway = await realtime_gateway(fake.url, tools=notes_tool(notes), greeting="")
        call = await open_call(gateway)
        async with LocalCall(call.pipeline, speed=4.0) as live:
            await wait_for(lambda: bool(fake.sessions), what="the session.update")
            call.pipeline.submit_text("Note milk and eggs")
            await wait_for(lambda: len(fake.said) == 1, what="the follow-up")
            await live.wait_agent_quiet(300)
        assert "add_note" in [tool["name"] for tool in fake.sessions[0]["tools"]]
        assert notes == ["milk", "eggs"]
        assert fake.function_outputs == [("call_1", "noted milk"), ("call_2", "noted eggs")]
        kinds = [event["type"] for event in fake.received if event["type"] != "input_audio_buffer.append"]
        after_outputs = kinds[kinds.index("conversation.item.create", kinds.index("response.create")):]
        assert after_outputs.count("response.create") == 1  # one follow-up for both calls
        assert call.transcript() == [("user", "Note milk and eggs"), ("agent", "I noted milk and eggs.")]


async def test_keys_pressed_together_reach_the_model_as_one_turn(realtime_gateway: GatewayFactory) -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        gateway = await realtime_gateway(fake.url, greeting="")
        call = await open_call(gateway)
        async with LocalCall(call.pipeline, speed=4.0) as live:
            await wait_for(lambda: bool(fake.sessions), what="the session.update")
            for digit in "123":
                call.pipeline.push_dtmf(digit)
            await wait_for(lambda: bool(fake.said), what="the answer")
            await live.wait_agent_quiet(300)
        texts = [event["item"]["content"][0]["text"] for event in fake.received_of("conversation.item.create")]
        assert texts == ["[The caller pressed keypad keys: 1 2 3]"]
        assert call.transcript()[0] == ("user", "[The caller pressed keypad keys: 1 2 3]")


async def test_voicegate_turn_detection_commits_the_turn_at_the_end_of_speech(
        realtime_gateway: GatewayFactory) -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        gateway = await realtime_gateway(fake.url, greeting="", turn_detection="voicegate")
        call = await open_call(gateway)
        async with LocalCall(call.pipeline, speed=2.0) as live:
            await wait_for(lambda: bool(fake.sessions), what="the session.update")
            live.say(tone(600))
            await wait_for(lambda: bool(fake.said), what="the answer")
            await live.wait_agent_quiet(300)
        assert fake.sessions[0]["audio"]["input"]["turn_detection"] is None
        kinds = [event["type"] for event in fake.received if event["type"] != "input_audio_buffer.append"]
        commit = kinds.index("input_audio_buffer.commit")
        assert kinds[commit + 1] == "response.create"
        assert live.agent_frames > 0


async def test_a_socket_dropped_mid_call_gets_the_apology_and_a_hang_up(realtime_gateway: GatewayFactory) -> None:
    async with FakeRealtime(api_key=KEY, stub=True, stub_ms=3000) as fake:
        fake.drop_after("response.output_audio.delta")
        gateway = await realtime_gateway(fake.url, greeting="")
        call = await open_call(gateway)
        async with LocalCall(call.pipeline, speed=4.0) as live:
            await wait_for(lambda: bool(fake.sessions), what="the session.update")
            call.pipeline.submit_text("Hello?")
            await wait_for(lambda: call.hung_up > 0, what="the hang-up")
        assert call.agent_lines()[-1] == APOLOGY
        assert live.agent_frames > 0


async def test_a_dropped_socket_with_cascade_fallback_hands_the_call_to_the_cascade(
        realtime_gateway: GatewayFactory) -> None:
    async with FakeRealtime(api_key=KEY, stub=True, stub_ms=3000) as fake:
        fake.drop_after("response.output_audio.delta")
        gateway = await realtime_gateway(fake.url, greeting="", on_failure="cascade")
        call = await open_call(gateway)
        async with LocalCall(call.pipeline, speed=4.0) as live:
            await wait_for(lambda: bool(fake.sessions), what="the session.update")
            call.pipeline.submit_text("Hello?")
            await wait_for(lambda: APOLOGY in call.agent_lines(), what="the apology")
            await live.wait_agent_quiet(300)
            said = len(call.agent_lines())
            call.pipeline.submit_text("who are you")
            await wait_for(lambda: len(call.agent_lines()) > said, what="the cascade's answer")
            await live.wait_agent_quiet(300)
        assert call.hung_up == 0
        assert "offline assistant" in call.agent_lines()[-1] or "not a full language model" in call.agent_lines()[-1]
        assert len(fake.connections) == 1 and fake.responses_created == 1  # the model heard nothing more


async def test_a_refused_handshake_gets_the_apology_not_a_crash(realtime_gateway: GatewayFactory) -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        fake.fail_connect = 401
        gateway = await realtime_gateway(fake.url, greeting=GREETING)
        call = await open_call(gateway)
        async with LocalCall(call.pipeline, speed=4.0):
            await wait_for(lambda: call.hung_up > 0, what="the hang-up")
        assert fake.rejected == [401]
        assert call.agent_lines() == [APOLOGY]


async def test_a_stalled_model_gets_the_apology(realtime_gateway: GatewayFactory) -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        fake.stall = True
        gateway = await realtime_gateway(fake.url, greeting=GREETING, response_timeout_ms=1000)
        call = await open_call(gateway)
        async with LocalCall(call.pipeline, speed=4.0):
            await wait_for(lambda: call.hung_up > 0, what="the hang-up")
        assert fake.responses_created == 1  # the greeting was asked for and never came
        assert call.agent_lines() == [APOLOGY]


async def test_a_model_that_stops_in_the_middle_of_a_reply_gets_the_apology(realtime_gateway: GatewayFactory) -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        gateway = await realtime_gateway(fake.url, greeting="", response_timeout_ms=1000)
        call = await open_call(gateway)
        async with LocalCall(call.pipeline, speed=4.0):
            await wait_for(lambda: bool(fake.sessions), what="the session.update")
            fake.stall_after("response.output_audio.delta")  # begins the answer, then nothing, socket open
            call.pipeline.submit_text("Hello?")
            await wait_for(lambda: call.hung_up > 0, what="the hang-up")
        assert "response.done" not in fake.sent
        assert call.agent_lines()[-1] == APOLOGY


async def test_a_model_that_never_sets_up_the_session_gets_the_apology(realtime_gateway: GatewayFactory) -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        fake.stall = True  # takes the socket, answers nothing
        gateway = await realtime_gateway(fake.url, greeting="", connect_timeout_ms=500)
        call = await open_call(gateway)
        async with LocalCall(call.pipeline, speed=4.0):
            await wait_for(lambda: call.hung_up > 0, what="the hang-up")  # no turn needed to notice
        assert len(fake.sessions) == 1 and fake.responses_created == 0
        assert call.agent_lines() == [APOLOGY]


async def test_a_rate_limit_error_gets_the_apology(realtime_gateway: GatewayFactory) -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        gateway = await realtime_gateway(fake.url, greeting="")
        call = await open_call(gateway)
        async with LocalCall(call.pipeline, speed=4.0):
            await wait_for(lambda: bool(fake.sessions), what="the session.update")
            fake.error_next("rate_limit_error", "rate_limit_exceeded")  # the answer to the next event we send
            call.pipeline.submit_text("Hello?")
            await wait_for(lambda: call.hung_up > 0, what="the hang-up")
        assert call.agent_lines() == [APOLOGY]  # nothing the model sent after the error was played


async def test_end_call_hangs_up_once_the_models_goodbye_has_played(realtime_gateway: GatewayFactory) -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        fake.script_tool_call("end_call", {})
        fake.script_reply("Goodbye!")
        gateway = await realtime_gateway(fake.url, greeting="")
        call = await open_call(gateway)
        async with LocalCall(call.pipeline, speed=4.0) as live:
            await wait_for(lambda: bool(fake.sessions), what="the session.update")
            call.pipeline.submit_text("That's all, bye")
            await wait_for(lambda: call.hung_up > 0, what="the hang-up")
            frames = live.agent_frames
        assert call.agent_lines() == ["Goodbye!"]
        assert frames * 20 >= 600 - 60  # the goodbye's audio played before the hang-up


async def test_the_beta_dialect_is_spoken_too(realtime_gateway: GatewayFactory) -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        gateway = await realtime_gateway(fake.url, greeting="", dialect="beta")
        call = await open_call(gateway, 8000)
        async with LocalCall(call.pipeline, speed=4.0) as live:
            await wait_for(lambda: bool(fake.sessions), what="the session.update")
            call.pipeline.submit_text("Hello there")
            await wait_for(lambda: bool(fake.said), what="the answer")
            await live.wait_agent_quiet(300)
        assert fake.connections[0].dialect == "beta"
        assert fake.sessions[0]["input_audio_format"] == "pcm16"
        assert call.transcript() == [("user", "Hello there"), ("agent", "You said: Hello there")]
        assert live.agent_frames * 20 >= 600 - 60


@pytest.mark.parametrize("status", [401, 403, 429, 503])
async def test_a_refused_handshake_is_a_typed_error_naming_the_status(status: int, tmp_path: Path) -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        fake.fail_connect = status
        with pytest.raises(RealtimeError) as refused:
            await RealtimeConnection.open(realtime_config(tmp_path, fake.url).realtime, KEY)
    assert refused.value.status == status and f"HTTP {status}" in refused.value.reason


async def test_a_handshake_that_never_completes_times_out(tmp_path: Path) -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        fake.hang_handshake = True
        config = realtime_config(tmp_path, fake.url, connect_timeout_ms=300).realtime
        with pytest.raises(RealtimeError) as refused:
            await RealtimeConnection.open(config, KEY)
        fake.hang_handshake = False
    assert refused.value.status is None and "300 ms" in refused.value.reason


async def test_a_model_never_reached_with_cascade_fallback_gets_the_cascades_greeting(
        realtime_gateway: GatewayFactory) -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        fake.fail_connect = 503
        gateway = await realtime_gateway(fake.url, greeting=GREETING, on_failure="cascade")
        call = await open_call(gateway)
        async with LocalCall(call.pipeline, speed=4.0) as live:
            await wait_for(lambda: bool(call.agent_lines()), what="the greeting")
            await live.wait_agent_quiet(300)
            call.pipeline.submit_text("who are you")
            await wait_for(lambda: len(call.agent_lines()) > 1, what="the cascade's answer")
            await live.wait_agent_quiet(300)
        assert call.agent_lines()[0] == GREETING  # in the local voice: the caller never heard of the trouble
        assert APOLOGY not in call.agent_lines() and call.hung_up == 0
        assert call.pipeline.fallback and fake.rejected == [503]


async def test_a_resumed_call_carries_on_with_the_conversation_so_far(realtime_gateway: GatewayFactory) -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        gateway = await realtime_gateway(fake.url, greeting=GREETING)
        call = await open_call(gateway)
        async with LocalCall(call.pipeline, speed=4.0) as live:
            await wait_for(lambda: bool(fake.said), what="the greeting")
            await live.wait_agent_quiet(300)
            call.pipeline.submit_text("My name is Sam")
            await wait_for(lambda: len(fake.said) == 2, what="the answer")
            await live.wait_agent_quiet(300)
        # The transport comes back (a WebRTC reconnect): a new pipeline, a new socket, the same session.
        resumed = gateway.new_pipeline(call.session, 16000, call.sink)
        async with LocalCall(resumed, speed=4.0) as live:
            await wait_for(lambda: len(fake.connections) == 2 and len(fake.sessions) == 2, what="the new session")
            await live.ticks_later(10)
        items = [event["item"] for event in fake.received_of("conversation.item.create")][1:]
        assert [(item["role"], item["content"][0]["text"]) for item in items] == [
            ("assistant", GREETING), ("user", "My name is Sam"), ("assistant", "You said: My name is Sam")]
        assert fake.responses_created == 2  # not greeted again


async def test_answering_machine_detection_hears_the_callee_and_the_model_does_not(
        realtime_gateway: GatewayFactory) -> None:
    async with FakeRealtime(api_key=KEY, stub=True) as fake:
        gateway = await realtime_gateway(fake.url, greeting="")  # a call we placed: greeted after detection
        call = await open_call(gateway)
        plan = plan_from_config(AmdConfig(probe=False), greeting="Hi, this is Acme calling about your order.")
        async with LocalCall(call.pipeline) as live:  # real time: the detector times the greeting by the clock
            await wait_for(lambda: bool(fake.sessions), what="the session.update")
            live.say(neural(["Hello?"])[0] + silence(1500))  # a person answers
            run = await asyncio.wait_for(run_detection(call.pipeline, call.session, plan, None), 30)
            await wait_for(lambda: bool(fake.said), what="the greeting")
            await live.wait_agent_quiet(300)
        assert run.decision is not None and run.decision.result == "human"
        assert fake.said == [plan.greeting]  # said by the model once detection let the call through
        assert "input_audio_buffer.speech_started" not in fake.sent  # the model never heard the "Hello?"
