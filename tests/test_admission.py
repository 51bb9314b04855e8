"""Admission control's policy as tables (internal/telemetry/admission.py), the process tree's CPU reader,
and the [admission] config's checks."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from voicegate.internal.config import ConfigError, load_config
from voicegate.internal.telemetry.admission import (
    MIN_CALL_COST,
    AdmissionPolicy,
    CallCost,
    NodeLoad,
    capacity,
    decide,
    engine_prior,
    estimated_load,
)
from voicegate.internal.telemetry.cpu import TreeCpu

POLICY = AdmissionPolicy()


def load(calls: int = 0, young: int = 0, cost: float = 0.079, new: float = 0.08, cores: float = 2.0,
         waits: tuple[tuple[str, float], ...] = (), lag: float = 0.0) -> NodeLoad:
    return NodeLoad(cores=cores, calls=calls, young_calls=young, call_cost=cost, new_call_cost=new,
                    queue_waits_ms=waits, loop_lag_ms=lag)


@pytest.mark.parametrize(("node", "admit", "reason", "words"), [
    (load(), True, "", ""),  # an idle node
    (load(calls=17), True, "", ""),  # (17 + 1) x 0.079 / 2 = 0.71
    (load(calls=19), False, "capacity", "estimated load 0.79 over 0.75 with 19 calls at 7.9 % each"),
    # A burst: 12 calls admitted in the last seconds have not shown their cost; at the prior they fill it.
    (load(calls=14, young=12, cost=0.02, new=0.12), False, "capacity", "12 new at 12.0 %"),
    (load(calls=14, young=0, cost=0.02, new=0.12), True, "", ""),  # settled at 2 %: room left
    (load(calls=1, waits=(("whisper", 100.0), ("piper", 900.0))), False, "queue",
     "the piper workers are 900 ms behind"),
    (load(calls=1, waits=(("piper", 750.0),)), True, "", ""),  # at the bound, not over it
    (load(calls=1, lag=300.0), False, "loop_lag", "the event loop runs 300 ms late"),
    # Late workers are named before the CPU estimate: they are what callers already hear.
    (load(calls=40, waits=(("piper", 2000.0),)), False, "queue", "piper"),
    (load(calls=3, cores=1, cost=0.3, new=0.3), False, "capacity", "on 1 cores"),  # 4 x 0.3 = 1.2 on one core
])
def test_the_policy_admits_or_refuses_with_a_reason(node: NodeLoad, admit: bool, reason: str, words: str) -> None:
    decision = decide(POLICY, node)
    assert (decision.admit, decision.reason) == (admit, reason)
    assert words in decision.detail


def test_admission_off_admits_whatever_the_load() -> None:
    assert decide(AdmissionPolicy(enabled=False), load(calls=500, waits=(("piper", 9000.0),), lag=900)).admit


def test_a_bound_of_zero_never_refuses_on_it() -> None:
    policy = AdmissionPolicy(queue_wait_ms=0, loop_lag_ms=0)
    assert decide(policy, load(calls=1, waits=(("piper", 9000.0),), lag=900)).admit


@pytest.mark.parametrize(("node", "expected"), [
    (load(calls=0, new=0.08), 0.04),  # the arriving call alone, at its prior
    (load(calls=10, young=0, cost=0.05, new=0.08), (10 * 0.05 + 0.08) / 2),
    (load(calls=10, young=4, cost=0.05, new=0.08), (6 * 0.05 + 5 * 0.08) / 2),
    (load(calls=10, young=4, cost=0.10, new=0.08), 11 * 0.10 / 2),  # measured above the prior: it stands
    (load(calls=2, young=5, cost=0.05, new=0.08), 3 * 0.08 / 2),  # never more young calls than calls
])
def test_young_calls_and_the_arriving_one_count_at_the_larger_of_prior_and_measure(node: NodeLoad,
                                                                                 expected: float) -> None:
    assert estimated_load(node) == pytest.approx(expected)


@pytest.mark.parametrize(("transport", "engines", "expected"), [
    ("sip", ["whisper", "piper"], 0.08),  # docs/performance.md: ~8 % of a core per SIP caller
    ("webrtc", ["whisper", "piper"], 0.12),  # ... and ~12 % per WebRTC caller
    ("sip", ["deepgram", "openai"], 0.01),  # remote engines: the node only carries the media
    ("sip", ["scripted", "espeak"], 0.01),
    ("webrtc", ["whisper", "espeak"], 0.09),
])
def test_the_prior_is_the_transports_media_plus_each_local_engine(transport: str, engines: list[str],
                                                                  expected: float) -> None:
    assert engine_prior(transport, engines) == pytest.approx(expected)


@pytest.mark.parametrize(("cores", "target", "cost", "expected"), [
    (2, 0.75, 0.08, 18), (1, 0.75, 0.12, 6), (16, 0.75, 0.06, 200), (2, 0.75, 0.0, int(1.5 / MIN_CALL_COST)),
])
def test_capacity(cores: float, target: float, cost: float, expected: int) -> None:
    assert capacity(cores, target, cost) == expected


def test_the_measured_cost_replaces_the_prior_once_enough_call_seconds_were_seen() -> None:
    cost = CallCost(prior=0.08, cores=2)
    cost.sample(cpu_s=0.3, elapsed_s=1.0, calls=2)  # 2 call-seconds: too few, the prior stands
    assert (cost.value, cost.settled) == (0.08, False)
    for _ in range(3):
        cost.sample(cpu_s=0.3, elapsed_s=1.0, calls=2)
    assert cost.settled and cost.value == pytest.approx(0.15)


def test_the_measured_cost_is_smoothed_and_clamped() -> None:
    cost = CallCost(prior=0.08, cores=2)
    for _ in range(10):
        cost.sample(cpu_s=0.5, elapsed_s=1.0, calls=10)  # 5 %
    cost.sample(cpu_s=1.5, elapsed_s=1.0, calls=10)  # one noisy second at 15 %
    assert 0.05 < cost.value < 0.08
    cost.sample(cpu_s=0.0, elapsed_s=1.0, calls=10)
    assert cost.value >= MIN_CALL_COST
    big = CallCost(prior=0.08, cores=1)
    for _ in range(10):
        big.sample(cpu_s=50.0, elapsed_s=1.0, calls=1)  # a sample past the cores (a clock jump) is capped
    assert big.value == pytest.approx(1.0)
    idle = CallCost(prior=0.08, cores=2)
    idle.sample(cpu_s=1.0, elapsed_s=1.0, calls=0)  # an idle node says nothing about a call's cost
    assert idle.measured is None


def test_the_tree_cpu_counts_a_busy_child() -> None:
    tree = TreeCpu()
    assert tree.spent() == 0.0  # the first read is the baseline
    child = subprocess.Popen([sys.executable, "-c", "import time\nend = time.process_time() + 0.5\n"
                              "while time.process_time() < end: pass\ntime.sleep(30)"])
    try:
        deadline = time.monotonic() + 60
        spent = 0.0
        while spent < 0.4 and time.monotonic() < deadline:  # until the child has burnt its half second
            time.sleep(0.2)
            spent += tree.spent()
        assert spent >= 0.4
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize(("key", "value"), [("target_load", "1.5"), ("busy", '"hang_up"'),
                                           ("queue_wait_ms", "-1"), ("retry_after_s", "0")])
def test_a_bad_admission_value_is_a_config_error_naming_the_key(tmp_path: Path, key: str, value: str) -> None:
    path = tmp_path / "voicegate.toml"
    path.write_text(f"[admission]\n{key} = {value}\n")
    with pytest.raises(ConfigError, match=f"admission.{key}"):
        load_config(path)
