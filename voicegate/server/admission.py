"""This node's admission control, composed: what it samples, what it asks the policy, what it reports.

The policy is internal/telemetry/admission.py (pure); this is the part that holds state. Once a second,
off the hot path (psutil reads /proc in a thread), it reads the CPU seconds of the server's process tree
and turns them into a per-call cost. When a call arrives (SIP INVITE, WHIP POST, POST /calls) the session
manager asks `refusal`, which also keeps the older hard limits: server.shed_wait_ms and
server.shed_loop_lag_ms refuse whatever [admission] says (docs/scaling.md). Every refusal is counted in
voicegate_calls_refused_total{transport,reason} and logged once with its reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from voicegate.internal.config import Config
from voicegate.internal.config.sizing import usable_cores
from voicegate.internal.session import Session, SessionLimitReached, TransportKind
from voicegate.internal.telemetry.admission import (
    DRAINING,
    LOOP_LAG,
    QUEUE,
    AdmissionPolicy,
    CallCost,
    NodeLoad,
    capacity,
    decide,
    engine_prior,
    estimated_load,
)
from voicegate.internal.telemetry.loop_lag import LoopLag
from voicegate.internal.telemetry.otel import Telemetry
from voicegate.internal.telemetry.queues import WorkQueue, overload_reasons
from voicegate.internal.tts.base import TextToSpeech

log = logging.getLogger("voicegate.server.admission")

SAMPLE_S = 1.0  # how often the process tree's CPU is read


class NodeAdmission:
    def __init__(self, config: Config, telemetry: Telemetry, loop_lag: LoopLag, engines: list[str],
                 sessions: Callable[[], list[Session]], draining: Callable[[], bool]) -> None:
        settings = config.admission
        self.config = config
        self.policy = AdmissionPolicy(enabled=settings.enabled, target_load=settings.target_load,
                                      queue_wait_ms=settings.queue_wait_ms,
                                      loop_lag_ms=config.server.shed_loop_lag_ms, settle_s=settings.settle_s,
                                      retry_after_s=settings.retry_after_s)
        self.cores = settings.cores or float(usable_cores())
        self.priors = {transport: settings.call_cost or engine_prior(transport, engines)
                       for transport in ("sip", "webrtc")}
        self.cost = CallCost(min(self.priors.values()), self.cores)
        self.telemetry = telemetry
        self.loop_lag = loop_lag
        self.queues: list[WorkQueue] = []  # recognition and synthesis (not Smart Turn: see Gateway._watch_load)
        self._sessions = sessions
        self._draining = draining
        self.shedding = False  # server.shed_* (or the admission queue bound) refuse now: /health's workers
        self.refused = 0

    async def run(self) -> None:
        """Sample the process tree's CPU once a second into the per-call cost, until cancelled."""
        if not (self.config.admission.enabled and self.config.admission.measure_cost):
            return
        from voicegate.internal.telemetry.cpu import TreeCpu

        tree = await asyncio.to_thread(TreeCpu)
        await asyncio.to_thread(tree.spent)
        last = time.monotonic()
        while True:
            await asyncio.sleep(SAMPLE_S)
            calls = len(self._sessions())
            with contextlib.suppress(Exception):  # a /proc read that fails is a sample skipped
                spent = await asyncio.to_thread(tree.spent)
                now = time.monotonic()
                self.cost.sample(spent, now - last, calls)
                last = now

    def load(self, transport: TransportKind) -> NodeLoad:
        sessions = self._sessions()
        since = time.time() - self.policy.settle_s
        # Until the cost is measured, each live call counts at its own transport's prior (WebRTC's is higher).
        cost = self.cost.value if self.cost.settled or not sessions else (
            sum(self.priors.get(session.transport, self.cost.prior) for session in sessions) / len(sessions))
        return NodeLoad(cores=self.cores, calls=len(sessions),
                        young_calls=sum(1 for session in sessions if session.created_at >= since),
                        call_cost=cost, new_call_cost=self.priors.get(transport, self.cost.prior),
                        queue_waits_ms=tuple((queue.pool, queue.pressure_ms()) for queue in self.queues),
                        loop_lag_ms=self.loop_lag.sustained_ms())

    def refusal(self, transport: TransportKind) -> SessionLimitReached | None:
        """Why a new call on `transport` is refused now, or None. Asking counts nothing."""
        retry = self.policy.retry_after_s
        if self._draining():
            return SessionLimitReached(int(self.config.server.drain_timeout_s), DRAINING, "this node is draining")
        server = self.config.server
        late = overload_reasons(self.queues, server.shed_wait_ms, 0.0, 0.0)
        lag = overload_reasons([], 0.0, self.loop_lag.sustained_ms(), server.shed_loop_lag_ms)
        shed = (late and SessionLimitReached(retry, QUEUE, late[0])) or (
            lag and SessionLimitReached(retry, LOOP_LAG, lag[0])) or None
        if shed is None:
            decision = decide(self.policy, self.load(transport))
            if not decision.admit:
                shed = SessionLimitReached(retry, decision.reason, decision.detail)
        if shed is not None and shed.reason in (QUEUE, LOOP_LAG) and not self.shedding:
            log.warning("shedding load: new calls get 503 while %s", shed.detail)
        self.shedding = shed is not None and shed.reason in (QUEUE, LOOP_LAG)
        return shed

    def count(self, transport: TransportKind, refusal: SessionLimitReached) -> None:
        """A call refused: counted by transport and reason, logged once with the reason in words (no
        caller identity: the transport's own log line names the call)."""
        self.refused += 1
        self.telemetry.calls_refused.add(1, {"transport": transport, "reason": refusal.reason})
        log.warning("call refused", extra={"transport": transport, "refusal_reason": refusal.reason,
                                           "detail": refusal.detail, "retry_after_s": refusal.retry_after_s})

    def describe(self) -> dict[str, Any]:
        """/health's admission component: what the node thinks it can serve."""
        load = self.load("sip")
        cost = load.call_cost
        return {"ok": True, "advisory": True, "enabled": self.policy.enabled, "cores": self.cores,
                "target_load": self.policy.target_load, "calls": load.calls, "young_calls": load.young_calls,
                "call_cost": round(cost, 4), "call_cost_source": "measured" if self.cost.settled else "prior",
                "load": round(estimated_load(load) - max(load.new_call_cost, cost) / self.cores, 3),
                "capacity": capacity(self.cores, self.policy.target_load, cost),
                "queue_wait_ms": self.policy.queue_wait_ms, "refused": self.refused}


def busy_sentences(text: str) -> list[str]:
    """[admission] busy_message sentence by sentence, as an agent's reply is said (and cached)."""
    return [sentence for sentence in re.split(r"(?<=[.!?])\s+", text.strip()) if sentence]


def busy_audio(tts: TextToSpeech, text: str) -> Callable[[], Awaitable[bytes]]:
    """The busy message at the SIP rate, from the phrase cache (its sentences are marked fixed at start)."""

    async def render() -> bytes:
        return b"".join([chunk for sentence in busy_sentences(text) async for chunk in tts.synthesize(sentence, 8000)])

    return render
