"""Registering with a real registrar: sipp answers our REGISTERs and checks our digest itself."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from tests.sip.conftest import RecordingHandler, SippResult, eventually, free_port, run_sipp, sip_config
from tests.sip.registrar import challenge_round, too_brief_round, write_scenario
from voicegate.internal.sip import TimerSettings, UserAgent

pytestmark = pytest.mark.slow

StartUa = Callable[..., Awaitable[UserAgent]]


@pytest.fixture
async def start_ua() -> AsyncIterator[StartUa]:
    """UserAgents with registrations; each test shuts its own down (that is when it un-REGISTERs)."""
    running: list[UserAgent] = []

    async def factory(handler: object, registrar_port: int, password: str, **registration: object) -> UserAgent:
        account = {"registrar": f"sip:127.0.0.1:{registrar_port}", "username": "alice", "password": password,
                   **registration}
        ua = UserAgent(sip_config(registrations=[account]), handler, bind=("127.0.0.1", 0),  # type: ignore[arg-type]
                       timers=TimerSettings())
        await ua.start()
        running.append(ua)
        return ua

    yield factory
    for ua in running:  # again, for a test that failed before its own shutdown
        await ua.shutdown(timeout_s=2)


def registrar(tmp_path: Path, rounds: list[str], transport: str = "u1") -> tuple[int, asyncio.Task[SippResult]]:
    port = free_port()
    task = asyncio.create_task(run_sipp(tmp_path, write_scenario(tmp_path, rounds), None, local_port=port,
                                        transport=transport, timeout=60))
    return port, task


def received_registers(output: str) -> list[str]:
    """The REGISTER requests in sipp's message trace, in order."""
    return re.findall(r"REGISTER sip:.*?\n\n", output.replace("\r", ""), flags=re.S)


@pytest.mark.parametrize("transport", ["udp", "tcp"])
async def test_correct_password_registers_refreshes_and_unregisters_on_shutdown(
        start_ua: StartUa, tmp_path: Path, transport: str) -> None:
    port, sipp = registrar(tmp_path, [
        challenge_round(0, "s3cret", grant=10, expires="3600"),
        challenge_round(1, "s3cret", grant=10, expires="3600"),
        challenge_round(2, "s3cret", grant=10, expires="0"),
    ], transport="u1" if transport == "udp" else "t1")
    ua = await start_ua(RecordingHandler(), port, "s3cret", transport=transport)
    status = ua.registrations.statuses()[0]
    await eventually(lambda: status.state == "registered", what="registered")
    assert status.last_status == 200 and status.failures == 0
    assert status.expires_at is not None
    # A 10 s grant is refreshed at the 5 s floor, well before it ends.
    await eventually(lambda: status.registered_count >= 2, timeout=30, what="a refresh")
    await ua.shutdown(timeout_s=5)
    assert status.state == "unregistered"
    result = await sipp
    result.check()
    registers = received_registers(result.output)
    assert len(registers) == 6
    call_ids = {re.search(r"Call-ID: (.*)", text).group(1) for text in registers}  # type: ignore[union-attr]
    assert len(call_ids) == 1, "one Call-ID for the registration's whole life"
    cseqs = [int(re.search(r"CSeq: (\d+) REGISTER", text).group(1)) for text in registers]  # type: ignore[union-attr]
    assert cseqs == sorted(cseqs) and len(set(cseqs)) == 6
    assert "Expires: 0" in registers[-1] and "Authorization: Digest" in registers[-1]
    assert all(f"SIP/2.0/{transport.upper()} " in text for text in registers)
    assert "s3cret" not in result.output


async def test_wrong_password_is_refused_and_retried_with_backoff(start_ua: StartUa, tmp_path: Path) -> None:
    port, sipp = registrar(tmp_path, [challenge_round(0, "s3cret", grant=60), challenge_round(1, "s3cret", grant=60)])
    ua = await start_ua(RecordingHandler(), port, "not-the-password")
    status = ua.registrations.statuses()[0]
    await eventually(lambda: status.failures >= 1, what="the first refusal")
    assert status.state == "backing-off" and status.last_status == 403
    assert status.next_attempt_at is not None
    # Backoff after the first failure is 1-2 s (2^1 with jitter); the second refusal proves the retry.
    await eventually(lambda: status.failures >= 2, timeout=30, what="a retry after backing off")
    assert status.state == "backing-off" and status.expires_at is None
    (await sipp).check()
    await ua.shutdown(timeout_s=2)
    assert ua.trusted_peers == [], "a registrar that refused us is not a trusted peer"


async def test_interval_too_brief_is_retried_with_min_expires(start_ua: StartUa, tmp_path: Path) -> None:
    port, sipp = registrar(tmp_path, [
        too_brief_round(0, 120),
        challenge_round(1, "s3cret", grant=120, expires="120"),
        challenge_round(2, "s3cret", grant=120, expires="0"),
    ])
    ua = await start_ua(RecordingHandler(), port, "s3cret", expires=60)
    status = ua.registrations.statuses()[0]
    await eventually(lambda: status.state == "registered", what="registered after the 423")
    assert ua.registrations.items[0].expires == 120
    await ua.shutdown(timeout_s=5)
    (await sipp).check()


async def test_invite_from_the_registrar_gets_trusted_peer_identity(start_ua: StartUa, tmp_path: Path) -> None:
    (tmp_path / "registrar").mkdir()
    port, sipp = registrar(tmp_path / "registrar", [
        challenge_round(0, "s3cret", grant=300, expires="3600"),
        challenge_round(1, "s3cret", grant=300, expires="0"),
    ])
    handler = RecordingHandler()
    ua = await start_ua(handler, port, "s3cret")
    await eventually(lambda: ua.registrations.statuses()[0].state == "registered", what="registered")
    assert ua.trusted_peers == ["127.0.0.1"]
    target = f"127.0.0.1:{ua.local_address().port}"
    (tmp_path / "caller").mkdir()
    (await run_sipp(tmp_path / "caller", "uac_call.xml", target)).check()
    await eventually(lambda: len(handler.answered) == 1, what="the registrar's call answered")
    identity = handler.answered[0].identity
    assert identity.resource_id == "sip:+15551234567" and identity.reason == "trusted peer 127.0.0.1"
    # The same call from another address is just a caller: trust follows the registrar's address.
    (tmp_path / "stranger").mkdir()
    (await run_sipp(tmp_path / "stranger", "uac_call.xml", target, extra=["-i", "127.0.0.2"])).check()
    await eventually(lambda: len(handler.answered) == 2, what="the stranger's call answered")
    assert handler.answered[1].identity.is_anonymous
    await ua.shutdown(timeout_s=5)
    (await sipp).check()
