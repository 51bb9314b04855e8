"""Running scenarios against a server: each (scenario, transport) its own task, up to `jobs` at a time,
its calls one after another (call 2 may depend on what call 1 left in memory).

For each call: dial from the right line (trusted or not), play the turns, hang up, wait for the server to
finish the call (its memory write lands after the hang-up), read the caller's memory when asked, then
work out which sound and words answered which turn, let Whisper hear the agent, and judge.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import httpx

from voicegate.internal.audio.resample import resample
from voicegate.internal.evals.checks import CallFacts
from voicegate.internal.evals.conversation import converse, until
from voicegate.internal.evals.hearing import Transcriber
from voicegate.internal.evals.judge import Completer
from voicegate.internal.evals.phone import CallSetupFailed, Phone
from voicegate.internal.evals.results import CallResult, PlacedCall, ScenarioResult, ScenarioRun
from voicegate.internal.evals.scenario import Call, Scenario, Transport
from voicegate.internal.evals.server_api import CallEvents, Observed, ServerApi, ServerApiError
from voicegate.internal.evals.sip_phone import RATE as SIP_RATE
from voicegate.internal.evals.sip_phone import SipLine
from voicegate.internal.evals.verdict import judge_call
from voicegate.internal.evals.voice import CallerVoice, Sound, VoiceError, sounds
from voicegate.internal.evals.webrtc_phone import EAR_RATE, OPUS_RATE, TokenRequired, WebRtcPhone, prepare_ice

log = logging.getLogger(__name__)

SERVER_END_WAIT_S = 10.0  # the server's call.ended after our hang-up
MEMORY_WAIT_S = 20.0  # a hang-up's memory write landing (the digest is written after the call)
MEMORY_POLL_S = 0.5


@dataclass(frozen=True)
class Targets:
    """Where the scenarios call, and how the eval may ask the server about them."""

    sip_uri: str = ""  # SIP scenarios call this (sip:agent@host:port)
    http_url: str = ""  # WebRTC scenarios dial its /whip; the API (memory, tokens, call events) lives here
    api_key: str = ""
    trusted_host: str = "127.0.0.1"  # the eval's SIP address for trusted callers (in sip.trusted_peers)
    untrusted_host: str = "127.0.0.2"  # ... and for callers the server must not believe


class Progress(Protocol):
    def started(self, unit: str, turns: int) -> None: ...

    def turn_played(self, unit: str) -> None: ...

    def played(self, unit: str) -> None: ...

    def call_done(self, unit: str, call: CallResult) -> None: ...

    def finished(self, result: ScenarioResult) -> None: ...


class EvalRunner:
    def __init__(self, targets: Targets, voice: CallerVoice, ears: Transcriber, progress: Progress, *,
                 judge_model: Completer | None = None, judge_unavailable: str = "") -> None:
        self.targets = targets
        self.voice = voice
        self.ears = ears
        self.progress = progress
        self.judge_model = judge_model
        self.judge_unavailable = judge_unavailable
        self.api: ServerApi | None = None
        self.events: CallEvents | None = None
        self._lines: dict[str, SipLine] = {}
        self._line_lock = asyncio.Lock()

    async def run(self, scenarios: list[Scenario], jobs: int) -> list[ScenarioResult]:
        targets = self.targets
        if targets.http_url:
            self.api = ServerApi(targets.http_url, targets.api_key)
            self.events = CallEvents(targets.http_url, targets.api_key)
            await self.events.start()
            prepare_ice(targets.http_url)
        limit = asyncio.Semaphore(max(1, jobs))

        async def one(scenario: Scenario, transport: Transport) -> ScenarioRun:
            async with limit:
                return await self.play(scenario, transport)

        try:
            runs = await asyncio.gather(*(one(s, t) for s in scenarios for t in s.transports))
            # Judged once every call is over: Whisper and the judge then take no CPU from a live call.
            return [await self._judge(run) for run in runs]
        finally:
            for line in self._lines.values():
                await line.stop()
            if self.events is not None:
                await self.events.close()
            if self.api is not None:
                await self.api.aclose()

    async def _line(self, trusted: bool) -> SipLine:
        host = self.targets.trusted_host if trusted else self.targets.untrusted_host
        async with self._line_lock:
            if host not in self._lines:
                line = SipLine(host, self.events)
                await line.start()
                self._lines[host] = line
            return self._lines[host]

    async def play(self, scenario: Scenario, transport: Transport) -> ScenarioRun:
        """Every call of one scenario on one transport, one after another."""
        run = ScenarioRun(scenario, transport)
        unit = ScenarioResult(scenario, transport).title
        started = time.monotonic()
        self.progress.started(unit, sum(len(call.turns) for call in scenario.calls))
        try:
            await self._prepare(scenario, transport)
            rate = SIP_RATE if transport == "sip" else EAR_RATE
            for index, call in enumerate(scenario.calls):
                turn_sounds = [await asyncio.to_thread(sounds, turn.parts, self.voice, rate) for turn in call.turns]
                if transport == "webrtc":  # rendered in a microphone's band, sent at Opus' rate
                    turn_sounds = [[Sound(resample(s.pcm, rate, OPUS_RATE), s.keys) for s in ss] for ss in turn_sounds]
                run.placed.append(await self._place(transport, index, call, turn_sounds,
                                                    lambda: self.progress.turn_played(unit)))
        except (VoiceError, ServerApiError) as exc:
            run.error = str(exc)
        except Exception as exc:  # one scenario's breakage is its own failure, not every other one's
            log.exception("eval scenario failed", extra={"scenario": unit})
            run.error = f"{type(exc).__name__}: {exc}"
        run.seconds = time.monotonic() - started
        self.progress.played(unit)
        return run

    async def _judge(self, run: ScenarioRun) -> ScenarioResult:
        result = ScenarioResult(run.scenario, run.transport, error=run.error, seconds=run.seconds)
        for placed in run.placed:
            call = await judge_call(placed, self.ears, self.judge_model, self.judge_unavailable)
            result.calls.append(call)
            self.progress.call_done(result.title, call)
        self.progress.finished(result)
        return result

    async def _prepare(self, scenario: Scenario, transport: Transport) -> None:
        if transport == "sip" and not self.targets.sip_uri:
            raise ServerApiError("no SIP target to call (--target sip:agent@host:port)")
        if transport == "webrtc" and not self.targets.http_url:
            raise ServerApiError("no HTTP target to call over WebRTC (--target http://host:port)")
        owners = scenario.memory_owners(transport)
        if not (scenario.reset_memory and owners):
            return
        if self.api is None or not self.api.api_key:
            if scenario.needs_memory():
                raise ServerApiError("this scenario checks memory, which needs the server's HTTP API and its API key "
                                     "(--target http://host:port, --api-key)")
            return
        for owner in owners:
            await self.api.erase(owner)

    async def _dial(self, transport: Transport, call: Call) -> tuple[Phone, str]:
        """A connected phone, and the caller's token (WebRTC callers with a subject)."""
        if transport == "sip":
            line = await self._line(call.caller.trusted)
            return await line.dial(self.targets.sip_uri, call.caller.number), ""
        assert self.api is not None
        token = await self.api.token(call.caller.subject) if call.caller.subject else ""
        phone = WebRtcPhone(self.events)
        try:
            await phone.dial(self.api.http, token)
        except TokenRequired:
            # A server that verifies tokens has no anonymous browser callers: the nearest thing is a caller
            # nobody has met, with a token for a subject made up for this one call.
            token = await self.api.token(f"eval-{secrets.token_hex(6)}")
            phone = WebRtcPhone(self.events)
            await phone.dial(self.api.http, token)
        return phone, token

    async def _place(self, transport: Transport, index: int, call: Call, turn_sounds: list[list[Sound]],
                     turn_played: Callable[[], None]) -> PlacedCall:
        """Make the call and gather what the server says about it; judging comes later (verdict.py)."""
        started = time.monotonic()
        placed = PlacedCall(index, call, CallFacts())
        try:
            phone, token = await self._dial(transport, call)
        except (CallSetupFailed, ServerApiError, httpx.HTTPError) as exc:
            placed.facts.setup_error = str(exc)
            for _ in call.turns:
                turn_played()
            return placed
        placed.phone, placed.connected = phone, time.monotonic()
        placed.records = await converse(phone, call, turn_sounds, lambda i, record: turn_played())
        placed.events = await self._server_side_end(phone)
        self._learn(phone, placed.events, placed.facts)
        if call.expect.memory:
            await self._read_memory(call, transport, token, placed.facts)
        placed.seconds = time.monotonic() - started
        return placed

    async def _server_side_end(self, phone: Phone) -> list[Observed]:
        """The call's events once the server has ended it too (or we stopped waiting)."""
        if not phone.tool_events_problem:
            def ended() -> bool:
                return any(seen.event.get("type") == "call.ended" for seen in phone.server_events())
            await until(ended, time.monotonic() + SERVER_END_WAIT_S)
        return phone.server_events()

    def _learn(self, phone: Phone, events: list[Observed], facts: CallFacts) -> None:
        facts.ended_by, facts.end_reason, facts.transferred_to = phone.ended_by, phone.end_reason, phone.transferred_to
        facts.events_problem = phone.server_events_problem
        facts.tools_problem = phone.tool_events_problem
        for seen in events:
            kind = seen.event.get("type")
            if kind == "call.started":
                facts.caller_kind = str(seen.event.get("caller", ""))
            elif kind == "call.ended" and seen.event.get("reason"):
                facts.end_reason = str(seen.event["reason"])
            elif kind == "tool":
                facts.tools.append(seen.event)

    async def _read_memory(self, call: Call, transport: Transport, token: str, facts: CallFacts) -> None:
        owner = call.caller.memory_owner(transport)
        if self.api is None:
            facts.memory_problem = "no HTTP API of the server to read it from (--target http://host:port)"
            return
        # A token reads the caller's own memory; an untrusted caller's number is read as the operator would.
        own = token if owner.startswith("jwt:") else ""
        wanted = call.expect.memory
        deadline = time.monotonic() + MEMORY_WAIT_S
        try:
            if not wanted.contains:  # nothing to wait for: let the pending hang-up writes land first
                while time.monotonic() < deadline:
                    if not await self.api.pending_writes():
                        break
                    await asyncio.sleep(MEMORY_POLL_S)
            while True:
                facts.memory = await self.api.memory(owner, own)
                done = all(p.regex.search(facts.memory) for p in wanted.contains)
                if done or time.monotonic() >= deadline:
                    return
                await asyncio.sleep(MEMORY_POLL_S)
        except (ServerApiError, httpx.HTTPError) as exc:
            facts.memory, facts.memory_problem = None, str(exc)
