"""Admission control: take a new call only when this node can still serve it within the latency target.

A node that takes every call serves all of them badly once it is past its capacity (measured without admission
control: 50 callers on 2 cores heard 72 of 250 replies). A caller who gets a clean busy (SIP 503 +
Retry-After, which sends Kamailio's dispatcher to the other node; WHIP 503) can be served elsewhere or call
back; a caller whose answers come 7 s late just hangs up. So, before each new call, `decide` weighs:

- the estimated load once this call is in: the live calls times what a call costs (CPU seconds of the
  server and its worker children per second, per call, measured live by `CallCost`), over the node's
  cores, against `target_load` (LiveKit's workers stop taking jobs past 0.75 for the same reason: the
  last quarter of a core is the headroom a burst of speech and the event loop's own work need);
- the speech workers' queues: a Whisper or Piper work item that has waited past `queue_wait_ms` means
  replies are already late, whatever the CPU figure says (Piper's queue is the measured wall);
- the event loop's sustained lateness (every call's media runs on it).

Pure functions over plain numbers: the gateway samples, this module decides, tests read it as a table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# The refusal reasons: the label of voicegate_calls_refused_total{reason}; a small fixed vocabulary (a
# metric label must never carry free text). The free text goes to the log and /health.
CAPACITY, QUEUE, LOOP_LAG, MAX_SESSIONS, DRAINING = "capacity", "queue", "loop_lag", "max_sessions", "draining"
REASONS = (CAPACITY, QUEUE, LOOP_LAG, MAX_SESSIONS, DRAINING)

# Prior per-call cost (fraction of one core) until the node has measured its own. docs/performance.md,
# "Capacity with real conversations": ~8 % of a core per talking SIP caller and ~12 % per WebRTC caller
# with the local Whisper and Piper engines. Split into the transport's own media work and each local
# engine's share, so a node with remote or scripted engines starts from what it really runs.
TRANSPORT_PRIOR = {"sip": 0.01, "webrtc": 0.05}
ENGINE_PRIOR = {"whisper": 0.04, "piper": 0.03}
MIN_CALL_COST = 0.005  # a measured cost is never taken below this: an idle call still holds media and VAD
MIN_CALL_SECONDS = 5.0  # call-seconds seen before the measured cost replaces the prior


@dataclass(frozen=True, slots=True)
class AdmissionPolicy:
    """The [admission] settings, as the policy reads them."""

    enabled: bool = True
    target_load: float = 0.75
    queue_wait_ms: float = 750.0
    loop_lag_ms: float = 250.0  # server.shed_loop_lag_ms: one knob for the loop, admission or not
    settle_s: float = 10.0
    retry_after_s: int = 5


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """What the node knows about itself when a call arrives."""

    cores: float
    calls: int  # live calls (sessions), all transports
    young_calls: int  # of them, those admitted within settle_s: they have not shown their cost yet
    call_cost: float  # measured (or prior) cores per established call
    new_call_cost: float  # the prior for the arriving call's transport and engines
    queue_waits_ms: tuple[tuple[str, float], ...] = ()  # (pool, how long an item waits there now)
    loop_lag_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class Admission:
    admit: bool
    reason: str = ""  # one of REASONS when refused
    detail: str = ""  # for the log and /health: "estimated load 0.82 over 0.75 with 19 calls at 7.9 % each"


def engine_prior(transport: str, engines: Iterable[str]) -> float:
    """A call's cost before any is measured: its transport's media work plus each local engine it uses."""
    return TRANSPORT_PRIOR.get(transport, max(TRANSPORT_PRIOR.values())) + sum(
        ENGINE_PRIOR.get(engine, 0.0) for engine in set(engines))


def estimated_load(load: NodeLoad) -> float:
    """The fraction of the node's cores in use once one more call is in. A call admitted in the last
    settle_s (and the arriving one) counts at the larger of the prior and the measured cost: a burst of
    arrivals has not started talking yet, and counted at the idle cost it would all be admitted at once."""
    young = min(load.young_calls, load.calls)
    arriving = max(load.new_call_cost, load.call_cost)
    used = (load.calls - young) * load.call_cost + (young + 1) * arriving
    return used / max(load.cores, 1e-6)


def capacity(cores: float, target_load: float, call_cost: float) -> int:
    """How many calls at `call_cost` fit under `target_load` of `cores` (for /health and sizing)."""
    return int(cores * target_load / max(call_cost, MIN_CALL_COST) + 1e-9)


def decide(policy: AdmissionPolicy, load: NodeLoad) -> Admission:
    """Admit the arriving call, or refuse it with the first reason that holds. Late workers come first:
    they are what callers already hear; then the loop; then the CPU estimate, which predicts it."""
    if not policy.enabled:
        return Admission(True)
    late = [(pool, wait) for pool, wait in load.queue_waits_ms if policy.queue_wait_ms and wait > policy.queue_wait_ms]
    if late:
        pool, wait = max(late, key=lambda item: item[1])
        return Admission(False, QUEUE, f"the {pool} workers are {wait:.0f} ms behind "
                                       f"(over admission.queue_wait_ms {policy.queue_wait_ms:.0f})")
    if policy.loop_lag_ms and load.loop_lag_ms >= policy.loop_lag_ms:
        return Admission(False, LOOP_LAG, f"the event loop runs {load.loop_lag_ms:.0f} ms late "
                                          f"(over {policy.loop_lag_ms:.0f} ms)")
    estimate = estimated_load(load)
    if estimate > policy.target_load:
        return Admission(False, CAPACITY, f"estimated load {estimate:.2f} over {policy.target_load:.2f} with "
                                          f"{load.calls} calls at {100 * load.call_cost:.1f} % each "
                                          f"({load.young_calls} new at {100 * load.new_call_cost:.1f} %) "
                                          f"on {load.cores:g} cores")
    return Admission(True)


class CallCost:
    """Cores per live call, from the CPU seconds the server's process tree spent between samples.

    Each sample (about one a second, off the hot path) gives (CPU seconds spent, seconds elapsed, calls live
    through it); its cost is cpu / elapsed / calls. Samples are smoothed (an exponential average: one
    noisy second moves it little) and clamped (never under MIN_CALL_COST, never over the node's cores).
    Until MIN_CALL_SECONDS of calls have been seen, the prior stands: the first second of one call
    (its greeting rendered, its models touched) is no measure of a call.
    """

    def __init__(self, prior: float, cores: float, smoothing: float = 0.2) -> None:
        self.prior = prior
        self.cores = cores
        self.smoothing = smoothing
        self.measured: float | None = None
        self.call_seconds = 0.0

    def sample(self, cpu_s: float, elapsed_s: float, calls: int) -> None:
        if calls <= 0 or elapsed_s <= 0:
            return  # nothing to divide by: an idle node says nothing about what a call costs
        cost = min(max(cpu_s / elapsed_s / calls, MIN_CALL_COST), self.cores)
        self.call_seconds += elapsed_s * calls
        self.measured = cost if self.measured is None else (
            self.measured + self.smoothing * (cost - self.measured))

    @property
    def settled(self) -> bool:
        return self.measured is not None and self.call_seconds >= MIN_CALL_SECONDS

    @property
    def value(self) -> float:
        return self.measured if self.measured is not None and self.settled else self.prior
