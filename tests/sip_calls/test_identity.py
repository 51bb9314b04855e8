"""Who a phone caller is, as the whole server decides it, and what that means for their memory."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest

from tests.pipeline.conftest import ScriptedStt
from tests.sip_calls.conftest import (
    CALLER,
    WAIT_FOR_BYE,
    RtpCapture,
    ServerFactory,
    agent_said,
    caller_audio,
    caller_bye,
    render,
    run_sipp,
    sip_calls_config,
    stream,
)
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.memory.provider import ChangeContext
from voicegate.internal.session import Session

pytestmark = pytest.mark.slow

TRUSTED = ["127.0.0.1/32"]  # sipp calls from here
ELSEWHERE = ["192.0.2.0/24"]  # a trunk that is not the caller


async def one_call(make_server: ServerFactory, tmp_path: Path, **scenario: str) -> Session:
    server = await make_server(stt=ScriptedStt([]), trusted_peers=scenario.pop("trusted", TRUSTED))
    (await run_sipp(tmp_path, render(tmp_path, ending=caller_bye(300), **scenario), server.target)).check()
    (session,) = await server.wait_ended()
    return session


async def test_trusted_peers_caller_number_is_the_identity(make_server: ServerFactory, tmp_path: Path) -> None:
    session = await one_call(make_server, tmp_path, from_user="5551234567")  # national: normalised to E.164
    assert session.identity.resource_id == f"sip:{CALLER}"
    assert session.identity.reason == "trusted peer 127.0.0.1"


async def test_trunk_asserted_identity_wins_over_from(make_server: ServerFactory, tmp_path: Path) -> None:
    session = await one_call(make_server, tmp_path, extra_header="P-Asserted-Identity: <tel:+15559876543>")
    assert session.identity.resource_id == "sip:+15559876543"


@pytest.mark.parametrize(
    ("trusted", "from_user", "extra_header", "reason"),
    [
        (ELSEWHERE, CALLER, "X-Test: 1", "untrusted source"),
        (TRUSTED, CALLER, "Privacy: id", "privacy requested"),
        (TRUSTED, "anonymous", "X-Test: 1", "anonymous caller"),
    ],
    ids=["untrusted-address", "privacy-id", "anonymous-from"],
)
async def test_unproven_or_withheld_callers_are_anonymous(
        make_server: ServerFactory, tmp_path: Path, trusted: list[str], from_user: str, extra_header: str,
        reason: str) -> None:
    session = await one_call(make_server, tmp_path, trusted=trusted, from_user=from_user,  # type: ignore[arg-type]
                             extra_header=extra_header)
    assert session.identity.is_anonymous and session.resource_id is None
    assert session.identity.reason == reason


def digest_server_config(tmp_path: Path) -> object:
    config = sip_calls_config(tmp_path)
    config.sip.auth.enabled = True
    config.sip.auth.users = {"sam": "correct horse"}
    return config


async def test_digest_authenticated_caller_is_trusted(make_server: ServerFactory, tmp_path: Path) -> None:
    server = await make_server(stt=ScriptedStt([]), config=digest_server_config(tmp_path))
    scenario = render(tmp_path, "uac_digest.xml", ending=caller_bye(300), FINAL_STATUS="200",
                      ACK_URI="[next_url]", ACK_BRANCH="[branch]")
    (await run_sipp(tmp_path, scenario, server.target, extra=["-au", "sam", "-ap", "correct horse"])).check()
    (session,) = await server.wait_ended()
    # The account is the identity, not the number the client put in From.
    assert session.identity.resource_id == "sip:sam"
    assert session.identity.reason == "digest authenticated"


async def test_wrong_digest_password_is_refused(make_server: ServerFactory, tmp_path: Path) -> None:
    server = await make_server(stt=ScriptedStt([]), config=digest_server_config(tmp_path))
    scenario = render(tmp_path, "uac_digest.xml", ending='<pause milliseconds="200"/>', FINAL_STATUS="403",
                      ACK_URI="sip:agent@[remote_ip]:[remote_port]", ACK_BRANCH="z9hG4bK-auth2-[call_id]")
    (await run_sipp(tmp_path, scenario, server.target, extra=["-au", "sam", "-ap", "wrong horse"])).check()
    await asyncio.sleep(0.3)
    assert server.ended == [] and len(server.sessions) == 0


async def test_trusted_caller_is_welcomed_back_and_an_untrusted_one_with_his_number_is_not(
        make_server: ServerFactory, capture: RtpCapture, tmp_path: Path) -> None:
    config = sip_calls_config(tmp_path, trusted_peers=TRUSTED, symmetric_rtp=False)
    config.memory.enabled = True
    config.memory.provider = "memory"
    config.memory.embedding = "none"
    config.pipeline.greeting = "Hello, how can I help?"
    config.pipeline.returning_greeting = "Welcome back, {name}! How can I help you today?"
    # pocketsphinx drops the "sam" of "my name is sam" (short, last, fricative onset lost at 8 kHz) when
    # the utterance ends with only the default 300 ms VAD hangover; 200 ms more and it is heard every time.
    config.pipeline.vad_offset_ms = 500
    server = await make_server(config=config)

    # Call 1: Sam introduces himself; the agent stores his name.
    first = tmp_path / "first"
    first.mkdir()
    audio = caller_audio(first, "my name is sam", lead_ms=2500)  # after the greeting, not over it
    scenario = render(first, media=stream(audio), ending=WAIT_FOR_BYE)
    sipp = asyncio.create_task(run_sipp(first, scenario, server.target))
    (session,) = await server.wait_live()
    await agent_said(session, containing="Sam")
    await server.hang_up(session)
    (await sipp).check()
    assert [e.text for e in session.conversation.transcript.entries()] == [
        "Hello, how can I help?", "my name is sam", "Nice to meet you, Sam."]

    # Call 2, same number, from the trusted trunk: the greeting knows him.
    second = tmp_path / "second"
    second.mkdir()
    scenario = render(second, ending=WAIT_FOR_BYE, media_port=capture.port)
    sipp = asyncio.create_task(run_sipp(second, scenario, server.target))
    (session,) = await server.wait_live()
    greeting = (await agent_said(session))[0]
    await server.hang_up(session)
    (await sipp).check()
    assert greeting.text == "Welcome back, Sam! How can I help you today?"
    assert "welcome back sam" in capture.heard()

    # Call 3, the same number from an address nobody vouches for: a stranger.
    config.sip.trusted_peers = ELSEWHERE
    third = tmp_path / "third"
    third.mkdir()
    scenario = render(third, ending=WAIT_FOR_BYE)
    sipp = asyncio.create_task(run_sipp(third, scenario, server.target))
    (session,) = await server.wait_live()
    greeting = (await agent_said(session))[0]
    await server.hang_up(session)
    (await sipp).check()
    assert session.identity.is_anonymous
    assert greeting.text == "Hello, how can I help?"


MAIN_LINE = "+15550100000"  # a PBX's main number: everyone behind the switchboard presents it
MEMORY_TABLES = ("memories", "memory_items", "memory_history", "session_digests")


def memory_rows(db_uri: str) -> dict[str, int]:
    with psycopg.connect(db_uri) as conn:
        return {table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # type: ignore[index]
                for table in MEMORY_TABLES}


async def test_a_shared_number_gets_no_memory_even_from_the_trusted_trunk(
        make_server: ServerFactory, tmp_path: Path, fresh_db: str) -> None:
    config = sip_calls_config(tmp_path, trusted_peers=TRUSTED)
    config.memory.enabled = True
    config.memory.provider = "pgvector"
    config.pgvector.connection_string = fresh_db
    config.memory.embedding = "none"
    config.memory.shared_numbers = ["555 010 0000"]  # as a deployer might write it; compared in E.164
    server = await make_server(stt=ScriptedStt([]), config=config)
    runtime = server.gateway.memory
    assert runtime is not None and server.gateway.session_memory is not None
    # Both numbers have memory from before the main line was listed.
    for number in (MAIN_LINE, CALLER):
        owner = runtime.owner_key(CallerIdentity("sip", number))
        assert owner is not None
        await runtime.edit(owner, "memory", "append", content="- The caller's name is Sam.",
                           context=ChangeContext("api"))
    before = memory_rows(fresh_db)

    async def call_from(number: str, directory: Path) -> Session:
        directory.mkdir()
        ended_so_far = len(server.ended)
        scenario = render(directory, from_user=number, ending=caller_bye(300))
        (await run_sipp(directory, scenario, server.target)).check()
        (session,) = (await server.wait_ended(ended_so_far + 1))[ended_so_far:]
        await server.gateway.session_memory.drain(30)  # type: ignore[union-attr]
        return session

    shared = await call_from("5550100000", tmp_path / "main-line")
    assert shared.identity.is_anonymous and shared.resource_id is None
    assert shared.identity.reason == "shared number"
    assert shared.conversation.memory == "" and shared.conversation.user_preferences == ""
    assert memory_rows(fresh_db) == before  # nothing read into the call, nothing written by it

    direct = await call_from(CALLER, tmp_path / "direct")  # the same trunk, a number of one person
    assert direct.resource_id == f"sip:{CALLER}"
    assert "Sam" in direct.conversation.memory
