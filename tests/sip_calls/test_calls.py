"""Phone calls from sipp through the whole server: heard, understood, answered out loud, and ended."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from tests.pipeline.conftest import ScriptedStt
from tests.sip_calls.conftest import (
    DTMF_1_PCAP,
    G729_OFFER,
    PCMA_OFFER,
    WAIT_FOR_BYE,
    RtpCapture,
    ServerFactory,
    agent_said,
    caller_audio,
    caller_bye,
    eventually,
    fragment,
    render,
    run_sipp,
    sip_calls_config,
    stream,
)
from voicegate.internal.session import Session

pytestmark = pytest.mark.slow


def said(session: object, role: str) -> list[str]:
    return [e.text for e in session.conversation.transcript.entries() if e.role == role]  # type: ignore[attr-defined]


async def test_pcmu_caller_is_understood_and_hears_the_reply(
        make_server: ServerFactory, capture: RtpCapture, tmp_path: Path) -> None:
    server = await make_server(symmetric_rtp=False)
    audio = caller_audio(tmp_path, "say hello world")
    scenario = render(tmp_path, media=stream(audio), ending=caller_bye(10000), media_port=capture.port,
                      answer_regexp="m=audio [0-9]+ RTP/AVP 0 101")
    (await run_sipp(tmp_path, scenario, server.target)).check()
    (session,) = await server.wait_ended()
    assert said(session, "user") == ["say hello world"]
    assert said(session, "agent") == ["Hello world."]
    assert session.end_reason == "sip bye"
    assert {p.payload_type for p in capture.packets()} == {0}
    assert "hello world" in capture.heard()
    assert await capture.played("Hello world.", server.tts) > 0.9
    assert await capture.played("Goodbye. Thanks for calling.", server.tts) < 0.5
    assert len(server.sessions) == 0


async def test_pcma_only_offer_is_answered_in_pcma(
        make_server: ServerFactory, capture: RtpCapture, tmp_path: Path) -> None:
    server = await make_server(symmetric_rtp=False)
    audio = caller_audio(tmp_path, "say hello world", "PCMA")
    scenario = render(tmp_path, media=stream(audio, "PCMA"), ending=WAIT_FOR_BYE, media_port=capture.port,
                      offer=PCMA_OFFER, answer_regexp="m=audio [0-9]+ RTP/AVP 8 101")
    sipp = asyncio.create_task(run_sipp(tmp_path, scenario, server.target))
    (session,) = await server.wait_live()
    await agent_said(session)
    await server.hang_up(session)
    (await sipp).check()
    assert said(session, "user") == ["say hello world"]
    assert {p.payload_type for p in capture.packets()} == {8}
    assert "hello world" in capture.heard()


async def test_goodbye_makes_the_agent_say_goodbye_and_hang_up(
        make_server: ServerFactory, capture: RtpCapture, tmp_path: Path) -> None:
    server = await make_server(symmetric_rtp=False)
    scenario = render(tmp_path, media=stream(caller_audio(tmp_path, "okay goodbye")), ending=WAIT_FOR_BYE,
                      media_port=capture.port)
    (await run_sipp(tmp_path, scenario, server.target)).check()  # sipp only ends on our BYE
    (session,) = await server.wait_ended()
    assert said(session, "user") == ["okay goodbye"]
    assert said(session, "agent") == ["Goodbye. Thanks for calling."]
    assert session.end_reason == "agent ended the call"
    assert await capture.played("Goodbye. Thanks for calling.", server.tts) > 0.9  # all played before the BYE


async def test_keypad_digits_from_rfc4733_events_get_an_answer(
        make_server: ServerFactory, capture: RtpCapture, tmp_path: Path) -> None:
    server = await make_server(symmetric_rtp=False)
    scenario = render(tmp_path, media=fragment("dtmf_pcap", PCAP_FILE=DTMF_1_PCAP), ending=WAIT_FOR_BYE,
                      media_port=capture.port, answer_regexp="telephone-event/8000")
    sipp = asyncio.create_task(run_sipp(tmp_path, scenario, server.target))
    (session,) = await server.wait_live()
    await agent_said(session)
    await server.hang_up(session)
    (await sipp).check()
    assert said(session, "user") == ["[The caller pressed keypad keys: 1]"]
    assert said(session, "agent") == ["You pressed 1."]
    assert await capture.played("You pressed 1.", server.tts) > 0.9


async def test_keypad_digits_sent_as_sip_info_get_an_answer(make_server: ServerFactory, tmp_path: Path) -> None:
    server = await make_server()
    scenario = render(tmp_path, media=fragment("dtmf_info"), ending=WAIT_FOR_BYE)
    sipp = asyncio.create_task(run_sipp(tmp_path, scenario, server.target))
    (session,) = await server.wait_live()
    await agent_said(session)
    await server.hang_up(session)
    (await sipp).check()
    assert said(session, "user") == ["[The caller pressed keypad keys: 4 #]"]
    assert said(session, "agent") == ["You pressed 4 #."]


async def test_hold_stops_our_audio_and_resume_restarts_it(
        make_server: ServerFactory, capture: RtpCapture, tmp_path: Path) -> None:
    server = await make_server()
    scenario = render(tmp_path, media=fragment("hold_and_resume", HOLD_MS=1500), ending=caller_bye(800),
                      media_port=capture.port)
    (await run_sipp(tmp_path, scenario, server.target)).check()  # checks a=recvonly, then a=sendrecv
    await server.wait_ended()
    packets = capture.packets()
    gaps = [(before, after) for before, after in itertools.pairwise(packets)
            if after.timestamp - before.timestamp > 160]
    # One stretch with no packets at all (sequence numbers run on, media time jumped), then the
    # stream resumes with the marker bit; nothing else interrupts the 20 ms cadence.
    assert len(gaps) == 1, [(b.sequence, a.sequence, a.timestamp - b.timestamp) for b, a in gaps]
    before, after = gaps[0]
    assert (after.sequence - before.sequence) % 65536 == 1
    assert after.timestamp - before.timestamp >= 25 * 160  # at least half a second of silence from us
    assert after.marker


async def test_offer_without_a_common_codec_is_refused_with_488(make_server: ServerFactory, tmp_path: Path) -> None:
    server = await make_server(stt=ScriptedStt([]))
    scenario = render(tmp_path, "uac_refused.xml", offer=G729_OFFER, EXPECTED_STATUS="488",
                      EXPECTED_REGEXP="Warning: 304")
    (await run_sipp(tmp_path, scenario, server.target)).check()
    assert server.ended == [] and len(server.sessions) == 0


async def test_retransmitted_invite_makes_one_call(make_server: ServerFactory, tmp_path: Path) -> None:
    server = await make_server(stt=ScriptedStt([]), ring_ms=500)
    scenario = render(tmp_path, "uac_retransmitted_invite.xml", ending=caller_bye(500))
    (await run_sipp(tmp_path, scenario, server.target)).check()
    await server.wait_ended()
    await asyncio.sleep(0.5)  # a second call, if there were one, would end at the same BYE
    assert len(server.ended) == 1


async def test_call_over_tcp_is_understood(make_server: ServerFactory, tmp_path: Path) -> None:
    server = await make_server()
    scenario = render(tmp_path, media=stream(caller_audio(tmp_path, "say hello world")), ending=WAIT_FOR_BYE)
    sipp = asyncio.create_task(run_sipp(tmp_path, scenario, server.target, transport="t1"))
    (session,) = await server.wait_live()
    await agent_said(session)
    await server.hang_up(session)  # our BYE goes back over the caller's TCP connection
    (await sipp).check()
    assert said(session, "user") == ["say hello world"]
    assert said(session, "agent") == ["Hello world."]


async def test_silent_caller_is_hung_up_after_the_rtp_timeout(make_server: ServerFactory, tmp_path: Path) -> None:
    server = await make_server(stt=ScriptedStt([]), rtp_timeout_s=1.5)
    scenario = render(tmp_path, ending=WAIT_FOR_BYE)  # no RTP at all
    (await run_sipp(tmp_path, scenario, server.target)).check()
    (session,) = await server.wait_ended()
    assert session.end_reason == "rtp timeout"


async def test_full_server_answers_503_with_retry_after(make_server: ServerFactory, tmp_path: Path) -> None:
    config = sip_calls_config(tmp_path)
    config.server.max_sessions = 1
    server = await make_server(stt=ScriptedStt([]), config=config)
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    first = asyncio.create_task(run_sipp(first_dir, render(first_dir, ending=WAIT_FOR_BYE), server.target))
    (session,) = await server.wait_live()
    refused = render(second_dir, "uac_refused.xml", EXPECTED_STATUS="503", EXPECTED_REGEXP="Retry-After: [0-9]+")
    (await run_sipp(second_dir, refused, server.target)).check()
    await server.hang_up(session)
    (await first).check()
    assert len(server.ended) == 1


async def test_twenty_concurrent_calls_all_complete(make_server: ServerFactory, tmp_path: Path) -> None:
    stt = ScriptedStt(["say hello world"] * 40)
    server = await make_server(stt=stt)
    audio = caller_audio(tmp_path, "say hello world")
    scenario = render(tmp_path, media=stream(audio), ending=caller_bye(7000))
    result = await run_sipp(tmp_path, scenario, server.target, extra=["-m", "20", "-l", "20", "-r", "10"],
                            timeout=120)
    result.check()
    ended = await server.wait_ended(20)
    assert len(ended) == 20 and {s.end_reason for s in ended} == {"sip bye"}
    assert all(said(s, "user") and all("say hello world" in text for text in said(s, "user")) for s in ended)
    await eventually(lambda: len(server.sessions) == 0, what="no live sessions")
    assert server.gateway.sip.dialogs == []
    assert server.gateway.sip_calls.calls == {}


async def test_public_address_is_advertised_for_signalling_and_media(
        make_server: ServerFactory, tmp_path: Path) -> None:
    config = sip_calls_config(tmp_path)
    config.sip.public_address = f"127.0.0.1:{config.sip.bind_port}"  # "host:port": the port is SIP's only
    server = await make_server(stt=ScriptedStt([]), config=config)
    scenario = render(tmp_path, ending=caller_bye(300), answer_regexp="c=IN IP4 127.0.0.1[[:space:]]")
    text = scenario.read_text().replace(
        '<recv response="200" rtd="true" rrs="true">\n    <action>',
        '<recv response="200" rtd="true" rrs="true">\n    <action>\n'
        f'      <ereg regexp="sip:voicegate@127.0.0.1:{config.sip.bind_port}" search_in="hdr" header="Contact:"'
        ' check_it="true" assign_to="contact"/>')
    scenario.write_text(text.replace('<Reference variables="answer"/>', '<Reference variables="answer,contact"/>'))
    (await run_sipp(tmp_path, scenario, server.target)).check()
    await server.wait_ended()


async def test_record_route_of_a_proxy_is_echoed_and_our_bye_follows_it(
        make_server: ServerFactory, tmp_path: Path) -> None:
    server = await make_server(stt=ScriptedStt([]))
    # The "proxy" is sipp itself: a loose route to its own address, so our BYE comes back to it.
    scenario = render(tmp_path, extra_header="Record-Route: <sip:[local_ip]:[local_port];lr>", ending=WAIT_FOR_BYE,
                      answer_regexp="m=audio")
    text = scenario.read_text().replace(
        '<recv response="200" rtd="true" rrs="true">\n    <action>',
        '<recv response="200" rtd="true" rrs="true">\n    <action>\n'
        '      <ereg regexp="lr" search_in="hdr" header="Record-Route:" check_it="true" assign_to="rr"/>')
    scenario.write_text(text.replace('<Reference variables="answer"/>', '<Reference variables="answer,rr"/>'))
    sipp = asyncio.create_task(run_sipp(tmp_path, scenario, server.target))
    (session,) = await server.wait_live()
    await server.hang_up(session)
    (await sipp).check()


async def test_a_session_ended_before_the_ack_still_sends_bye_and_starts_no_media(
        make_server: ServerFactory, tmp_path: Path) -> None:
    # The session can end (shutdown, an admin, the agent) between our 200 and the caller's ACK, or
    # between the ACK and media start: the caller must still get its BYE, and no media may start.
    server = await make_server(stt=ScriptedStt([]))
    scenario = render(tmp_path, "uac_slow_ack.xml", ending=WAIT_FOR_BYE, ACK_DELAY_MS=1500)
    sipp = asyncio.create_task(run_sipp(tmp_path, scenario, server.target))
    await eventually(lambda: len(server.sessions) == 1, what="the answered call's session")
    (session,) = server.sessions.sessions()
    assert server.answered() == 0  # the 200 is out, the ACK is not in yet
    await server.hang_up(session)
    (await sipp).check()  # ACK, then our BYE, 200
    await eventually(lambda: server.gateway.sip_calls.calls == {}, what="the call released")
    assert session.pipeline is None and session.ended


async def test_cancel_while_the_session_opens_leaves_no_session_behind(
        make_server: ServerFactory, tmp_path: Path) -> None:
    config = sip_calls_config(tmp_path, ring_ms=100)
    config.memory.enabled = True
    config.memory.provider = "memory"
    config.memory.embedding = "none"
    server = await make_server(stt=ScriptedStt([]), config=config)
    memory = server.gateway.session_memory
    load = memory.start

    async def slow_load(session: Session) -> None:
        await asyncio.sleep(1.0)  # the caller's memory loading from a slow database
        await load(session)

    memory.start = slow_load  # the CANCEL lands while the session is being opened
    (await run_sipp(tmp_path, render(tmp_path, "uac_cancel.xml"), server.target)).check()  # 200, 487, ACK
    (session,) = await server.wait_ended()
    assert session.end_reason == "set-up abandoned"
    await eventually(lambda: len(server.sessions) == 0 and server.gateway.sip_calls.calls == {},
                     what="nothing left")


async def test_shutdown_hangs_up_every_call(make_server: ServerFactory, tmp_path: Path) -> None:
    server = await make_server(stt=ScriptedStt([]))
    directories = [tmp_path / f"caller{i}" for i in range(3)]
    callers = []
    for directory in directories:
        directory.mkdir()
        callers.append(asyncio.create_task(
            run_sipp(directory, render(directory, ending=WAIT_FOR_BYE), server.target)))
    await server.wait_live(3)
    await server.gateway.stop()  # graceful: a BYE for every live call before the transports close
    for caller in callers:
        (await caller).check()
    assert sorted(s.end_reason for s in server.ended) == ["sip shutdown"] * 3
