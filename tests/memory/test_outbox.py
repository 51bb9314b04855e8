"""The hang-up outbox: what a call leaves to write survives an outage and a restart, in bounded memory."""

from __future__ import annotations

import asyncio
import gc
import json
import time
import weakref
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest

from tests.memory.test_calls import memory_config
from tests.pipeline.conftest import ScriptedStt
from voicegate.internal.db import EmbeddedPostgres
from voicegate.internal.event_envelope import CollectingSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.memory.errors import MemoryUnavailable
from voicegate.internal.memory.outbox import HangupOutbox, HangupWrite, StepFailed, retry_delay, transient
from voicegate.internal.memory.provider import OwnerErased
from voicegate.internal.memory.sessions import landing
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.internal.session import Session
from voicegate.server.gateway import Gateway

SAM = CallerIdentity("sip", "+15551234567", "trusted peer")


def entry(owner: str = "ab" * 32, **fields: Any) -> HangupWrite:
    return HangupWrite(owner=owner, session_id="s1", transport="sip", epoch=0, steps=["digest"], **fields)


def outbox(directory: Path, **limits: Any) -> HangupOutbox:
    settings: dict[str, Any] = {"retry_max_s": 0.2, "max_age_s": 3600.0, "max_entries": 100}
    settings.update(limits)
    return HangupOutbox(directory, **settings)


async def store_down(item: HangupWrite) -> None:
    """A step whose store cannot be reached: every attempt fails, to be retried."""
    raise StepFailed("OperationalError")


async def wait_until(condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def test_back_off_doubles_up_to_the_cap() -> None:
    assert [retry_delay(n, 4.0) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


async def test_a_failing_write_is_retried_until_it_lands_and_its_file_goes(tmp_path: Path) -> None:
    box = outbox(tmp_path)
    tries: list[int] = []

    async def digest(item: HangupWrite) -> None:
        tries.append(item.attempts)
        if len(tries) < 3:
            raise StepFailed("OperationalError")

    box.add_step("digest", digest)
    await box.start()
    await box.put(entry(summary="asked about invoices"))
    await wait_until(lambda: box.landed == 1)
    assert tries == [0, 1, 2]
    assert list(tmp_path.glob("*.json")) == []
    await box.stop(1)


async def test_an_erased_caller_drops_the_entry_and_later_steps(tmp_path: Path) -> None:
    box = outbox(tmp_path)
    ran: list[str] = []

    async def erased(item: HangupWrite) -> None:
        ran.append("digest")
        raise OwnerErased(2)

    async def later(item: HangupWrite) -> None:
        ran.append("reconcile")

    box.add_step("digest", erased)
    box.add_step("reconcile", later)
    await box.start()
    await box.put(HangupWrite(owner="cd" * 32, session_id="s", transport="sip", epoch=0,
                              steps=["digest", "reconcile"]))
    await wait_until(lambda: box.pending == 0)
    assert ran == ["digest"] and list(tmp_path.glob("*.json")) == []
    await box.stop(1)


async def test_a_write_the_store_refuses_for_its_content_is_dropped_audited_and_never_blocks_the_next(
        tmp_path: Path) -> None:
    """PostgreSQL refusing what an entry holds (DataError) is not an outage: that step is dropped at once,
    reported to the audit hook, and the entries behind it land."""
    box = outbox(tmp_path)
    tried: list[str] = []
    refused: list[tuple[str, str]] = []

    async def digest(item: HangupWrite) -> None:
        tried.append(item.summary)

        async def write() -> None:
            if "\x00" in item.summary:
                raise psycopg.DataError("invalid byte sequence for encoding \"UTF8\": 0x00")

        await landing(write())

    async def audit(item: HangupWrite, step: str, reason: str) -> None:
        refused.append((step, reason))

    box.add_step("digest", digest)
    box.on_rejected = audit
    await box.start()
    await box.put(entry(summary="bad \x00 line", created_at=time.time() - 10))
    await box.put(entry(owner="cd" * 32, summary="a later caller"))
    await wait_until(lambda: box.pending == 0)
    assert tried == ["bad \x00 line", "a later caller"]  # each tried once: a refusal is not retried
    assert box.rejected == 1 and box.landed == 2 and box.failed_attempts == 0
    assert refused == [("digest", "DataError")]
    await box.stop(1)


def test_only_an_unreachable_store_is_worth_another_try() -> None:
    import httpx

    def wrapped(inner: Exception) -> Exception:
        try:
            try:
                raise inner
            except Exception:
                raise MemoryUnavailable("memory could not be saved") from None
        except MemoryUnavailable as outer:
            return outer

    request = httpx.Request("POST", "http://store/v1")
    for retry in (psycopg.OperationalError("connection refused"), ConnectionRefusedError(), TimeoutError(),
                  wrapped(psycopg.OperationalError("server closed the connection")),
                  MemoryUnavailable("memory kept changing underneath this write"),
                  httpx.ConnectError("refused", request=request),
                  httpx.HTTPStatusError("busy", request=request, response=httpx.Response(503, request=request))):
        assert transient(retry), retry
    for drop in (psycopg.DataError("0x00"), psycopg.errors.UniqueViolation("duplicate"),
                 wrapped(psycopg.DataError("0x00")), ValueError("bad"), KeyError("x"),
                 httpx.HTTPStatusError("bad", request=request, response=httpx.Response(422, request=request))):
        assert not transient(drop), drop


async def test_entries_made_in_the_same_millisecond_land_in_the_order_they_were_put(tmp_path: Path) -> None:
    box = outbox(tmp_path)
    landed: list[str] = []

    async def digest(item: HangupWrite) -> None:
        landed.append(item.summary)

    box.add_step("digest", digest)
    same = time.time()
    # Owners chosen so that the file names sort the other way round from the order of arrival.
    for n in range(5):
        await box.put(entry(owner=f"{9 - n:02d}" * 32, summary=f"caller {n}", created_at=same))
    await box.start()
    await wait_until(lambda: len(landed) == 5, timeout=10)
    assert landed == [f"caller {n}" for n in range(5)]
    await box.stop(0.2)


async def test_an_entry_that_keeps_failing_does_not_hold_up_the_ones_behind_it(tmp_path: Path) -> None:
    box = outbox(tmp_path, retry_max_s=5.0)
    landed: list[str] = []

    async def digest(item: HangupWrite) -> None:
        if item.summary == "stuck":
            raise StepFailed("LockNotAvailable")
        landed.append(item.summary)

    box.add_step("digest", digest)
    await box.start()
    await box.put(entry(summary="stuck", created_at=time.time() - 10))  # the oldest: tried first
    for n in range(3):
        await box.put(entry(owner=f"{n:02d}" * 32, summary=f"caller {n}"))
    await wait_until(lambda: len(landed) == 3, timeout=10)
    assert landed == ["caller 0", "caller 1", "caller 2"] and box.pending == 1
    assert not box.stuck  # others land: the store is not down
    await box.stop(0.2)


async def test_a_store_that_keeps_failing_shows_the_outbox_stuck(tmp_path: Path) -> None:
    box = outbox(tmp_path, retry_max_s=0.2)

    box.add_step("digest", store_down)
    await box.start()
    await box.put(entry(summary="waiting"))
    await wait_until(lambda: box.stuck)
    described = box.describe()
    assert described["stuck"] is True and described["pending"] == 1 and described["failing_attempts"] >= 3
    assert "waiting" not in json.dumps(described)  # counts only
    await box.stop(0.2)


async def test_pending_writes_survive_a_restart_and_old_ones_expire(tmp_path: Path) -> None:
    first = outbox(tmp_path, max_age_s=10**9)

    first.add_step("digest", store_down)
    await first.start()
    await first.put(entry(summary="kept"))
    await first.put(entry(owner="ef" * 32, summary="too old", created_at=time.time() - 7200))
    await first.stop(0.5)
    assert len(list(tmp_path.glob("*.json"))) == 2  # left for the next start
    landed: list[str] = []

    async def up(item: HangupWrite) -> None:
        landed.append(item.summary)

    second = outbox(tmp_path, max_age_s=3600.0)
    second.add_step("digest", up)
    await second.start()
    await wait_until(lambda: second.pending == 0)
    assert landed == ["kept"] and second.dropped == 1
    await second.stop(1)


async def test_a_full_outbox_drops_its_oldest_entry(tmp_path: Path) -> None:
    box = outbox(tmp_path, max_entries=3)

    box.add_step("digest", store_down)
    await box.start()
    for n in range(5):
        await box.put(entry(owner=f"{n:02d}" * 32, created_at=time.time() - 100 + n, summary=str(n)))
    summaries = sorted(json.loads(p.read_text())["summary"] for p in tmp_path.glob("*.json"))
    assert summaries == ["2", "3", "4"] and box.dropped == 2
    await box.stop(0.2)



async def test_an_entry_dropped_for_room_while_its_step_fails_does_not_come_back(tmp_path: Path) -> None:
    box = outbox(tmp_path, max_entries=1)
    trying, fail = asyncio.Event(), asyncio.Event()

    async def slow_down(item: HangupWrite) -> None:
        trying.set()
        await fail.wait()
        raise StepFailed("store down")

    box.add_step("digest", slow_down)
    await box.start()
    await box.put(entry(owner="00" * 32, created_at=time.time() - 10, summary="old"))
    await trying.wait()  # the worker holds "old" in its step
    await box.put(entry(owner="11" * 32, summary="new"))  # no room: "old" is dropped
    fail.set()  # ...and only then does its step fail, and the worker would keep it for a retry
    await wait_until(lambda: box.failed_attempts >= 1)
    await asyncio.sleep(0.1)
    summaries = sorted(json.loads(p.read_text())["summary"] for p in tmp_path.glob("*.json"))
    assert summaries == ["new"] and box.dropped == 1 and box.pending == 1
    await box.stop(0.2)


# ---- through the gateway, with PostgreSQL stopped at hang-up ---------------------------------------


@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL of this test's own, so stopping it disturbs no other test."""
    server = EmbeddedPostgres(tmp_path / "pg")
    server.start_sync()
    yield server
    server.stop_sync()


@pytest.fixture
async def gateway_on(tmp_path: Path) -> AsyncIterator[Any]:
    started: list[Gateway] = []

    async def make(uri: str, shutdown_timeout_s: float | None = None) -> Gateway:
        config = memory_config(tmp_path, uri, write_retry_max_s=1.0, read_timeout_ms=2000)
        config.pgvector.connect_timeout_s = 1.0
        # These tests hold up to 100 sessions at once to fill the outbox; admission control (on by default)
        # would rightly refuse most of them on 2 cores, and what is tested here is the hang-up path.
        config.admission.enabled = False
        if shutdown_timeout_s is not None:  # read at start: how long stop() lets pending writes try
            config.server.shutdown_timeout_s = shutdown_timeout_s
        gateway = Gateway(config, stt=ScriptedStt([]))
        await gateway.start()
        started.append(gateway)
        return gateway

    yield make
    for gateway in started:
        await gateway.stop()


async def talk(gateway: Gateway, *turns: str, caller: CallerIdentity = SAM) -> Session:
    session = await gateway.open_session(caller, "talk")
    pipeline = gateway.new_pipeline(session, 16000, CollectingSink())
    async with LocalCall(pipeline, speed=6.0) as live:
        await live.wait_agent_quiet(100)
        for text in turns:
            pipeline.submit_text(text)
            await live.wait_agent_quiet(100)
    return session


def digest_lines(gateway: Gateway) -> str:
    assert gateway.memory is not None
    owner = gateway.memory.owner_key(SAM)
    assert owner is not None
    return gateway.memory.documents(owner)["memory"].content


@pytest.mark.slow
async def test_hang_ups_during_an_outage_land_after_it_in_flat_memory(own_postgres: EmbeddedPostgres,
                                                                      gateway_on: Any, tmp_path: Path) -> None:
    uri = own_postgres.start_sync()
    gateway = await gateway_on(uri)
    assert gateway.sessions is not None and gateway.session_memory is not None and gateway.memory is not None
    sessions = [await talk(gateway, "my order number is 0 and the parcel is late")]
    for n in range(1, 100):  # the same through the transcript directly: the hang-up path is what is tested
        session = await gateway.open_session(SAM, "talk")
        session.conversation.transcript.add("user", f"my order number is {n} and the parcel is late " * 40)
        session.conversation.transcript.add("agent", "I am sorry to hear that. " * 40)
        sessions.append(session)
    own_postgres.stop_sync()  # the database goes away just before the callers hang up
    process = psutil.Process()
    gc.collect()
    before = process.memory_info().rss
    refs = [weakref.ref(s) for s in sessions]
    for session in sessions:
        await gateway.sessions.end(session, "caller hung up")
    del sessions, session
    outbox = gateway.session_memory.outbox
    await wait_until(lambda: outbox.pending == 100)
    # The outage goes on while the writes retry (a round: the connect timeout, then <= 1 s of back-off).
    await wait_until(lambda: outbox.failed_attempts >= 5, timeout=120)
    gc.collect()
    assert all(ref() is None for ref in refs), "an ended call is pinned in memory by its pending write"
    grown_mib = (process.memory_info().rss - before) / 2**20
    assert grown_mib < 25, f"resident memory grew {grown_mib:.1f} MiB for 100 pending hang-ups"
    assert outbox.pending == 100 and outbox.landed == 0
    assert len(list((tmp_path / "data" / "memory-outbox").glob("*.json"))) == 100
    own_postgres.start_sync()  # back
    await wait_until(lambda: outbox.pending == 0, timeout=90)
    owner = gateway.memory.owner_key(SAM)
    assert owner is not None
    memory = (await gateway.memory.latest(owner))["memory"].content
    assert "## Recent calls" in memory and "parcel is late" in memory
    assert outbox.landed == 100 and outbox.dropped == 0


@pytest.mark.slow
async def test_a_restart_lands_the_writes_an_outage_left(own_postgres: EmbeddedPostgres, gateway_on: Any) -> None:
    uri = own_postgres.start_sync()
    first = await gateway_on(uri, shutdown_timeout_s=1.0)
    assert first.sessions is not None and first.session_memory is not None
    session = await talk(first, "I am calling about the broken heater")
    own_postgres.stop_sync()
    await first.sessions.end(session, "caller hung up")
    await wait_until(lambda: first.session_memory is not None and first.session_memory.outbox.pending == 1)
    await first.stop()  # still down: the write cannot land, and stays on disk
    own_postgres.start_sync()
    second = await gateway_on(uri)  # the same data directory: the pending file is picked up
    assert second.session_memory is not None and second.memory is not None
    await wait_until(lambda: second.session_memory is not None and second.session_memory.outbox.landed == 1)
    owner = second.memory.owner_key(SAM)
    assert owner is not None
    assert "broken heater" in (await second.memory.latest(owner))["memory"].content


async def test_shutdown_lands_pending_writes_before_closing_the_store(own_postgres: EmbeddedPostgres,
                                                                       gateway_on: Any) -> None:
    uri = own_postgres.start_sync()
    gateway = await gateway_on(uri)
    assert gateway.sessions is not None and gateway.session_memory is not None
    session = await talk(gateway, "the invoice for march is wrong")
    await gateway.sessions.end(session, "caller hung up")
    await gateway.stop()  # at once: the hang-up write must land before the pool and the bus close
    assert gateway.session_memory.outbox.pending == 0 and gateway.session_memory.outbox.landed == 1
    async with await psycopg.AsyncConnection.connect(uri) as conn:
        cursor = await conn.execute("SELECT content FROM memories WHERE scope = 'memory'")
        rows = await cursor.fetchall()
    assert len(rows) == 1 and "invoice for march" in rows[0][0]


async def test_a_typed_nul_neither_poisons_the_outbox_nor_holds_up_later_callers(
        own_postgres: EmbeddedPostgres, gateway_on: Any) -> None:
    """A DataChannel turn with U+0000 (PostgreSQL refuses it in text): the call's memory lands without
    it, and the next caller's lands too, with /health saying all is well."""
    uri = own_postgres.start_sync()
    gateway = await gateway_on(uri)
    assert gateway.sessions is not None and gateway.session_memory is not None and gateway.memory is not None
    first = await talk(gateway, "my order number is 55\u0000\u001b7 and the parcel is late")
    await gateway.sessions.end(first, "caller hung up")
    kim = CallerIdentity("sip", "+15557654321", "trusted peer")
    second = await talk(gateway, "I am calling about the broken heater", caller=kim)
    await gateway.sessions.end(second, "caller hung up")
    outbox = gateway.session_memory.outbox
    await wait_until(lambda: outbox.pending == 0 and outbox.landed == 2, timeout=60)
    for caller, said in ((SAM, "parcel is late"), (kim, "broken heater")):
        owner = gateway.memory.owner_key(caller)
        assert owner is not None
        assert said in (await gateway.memory.latest(owner))["memory"].content
    assert outbox.rejected == 0 and outbox.failed_attempts == 0
    health = (await gateway.health())["components"]["memory"]
    assert health["ok"] is True and health["outbox"]["stuck"] is False, health
