"""Load through the proxy: sipp places calls at 5 calls/s, 20 at a time, to Kamailio in front of two real
`voicegate serve` nodes on one PostgreSQL (tests/cluster/harness.py). Each caller says a phrase the node
answers, so audio flows both ways through the whole pipeline. Every call completes, both nodes take a
share, and afterwards neither node holds a session, an RTP socket, or more descriptors and asyncio tasks
than before the load.

`make test` places 30 calls after the warm-up (six seconds of arrivals: with 4 s of talk the 20-call
limit is reached); `make soak` places 800 (ten times the full size of 80; tests/scale.py)."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from tests.cluster.harness import Node, Proxy, cluster, scenario
from tests.scale import scaled
from tests.sip.conftest import run_sipp
from tests.sip_calls.conftest import caller_audio, stream

pytestmark = pytest.mark.slow

CALLS, RATE, LIMIT = scaled(30, 80), 5, 20
WARM_UP_CALLS = 10
TALK_MS = 4000
# The node's database pool opens connections as concurrent calls need them and keeps them (up to
# [pgvector] pool_max, 10 by default) after the load: descriptors the warm-up may not have opened yet.
POOL_MAX = 10
SLACK = 5  # as test_sip_load allows: a log rotation, a timer's socket, an engine's pipe


@dataclass(frozen=True)
class Footprint:
    """What a node holds, read from outside the process: its own /health and /metrics, and the kernel."""

    sessions: int
    tasks: int
    files: int
    rtp_sockets: int


def footprint(node: Node) -> Footprint:
    assert node.proc is not None
    health = httpx.get(f"{node.url}/health", timeout=10).json()
    metrics = httpx.get(f"{node.url}/metrics", timeout=10).text
    tasks = re.search(r"^voicegate_event_loop_tasks ([0-9.]+)$", metrics, re.MULTILINE)
    assert tasks is not None, "the node's /metrics has no voicegate_event_loop_tasks"
    low, high = node.rtp_ports
    process = psutil.Process(node.proc.pid)
    rtp = [c for c in process.net_connections("udp")
           if c.laddr and low <= c.laddr.port <= high and c.laddr.port != node.sip_port]
    return Footprint(sessions=int(health["components"]["sessions"]["live"]), tasks=int(float(tasks.group(1))),
                     files=process.num_fds(), rtp_sockets=len(rtp))


def sipp_counts(directory: Path) -> tuple[int, int]:
    """(successful, failed) calls by sipp's own account: the last line of its -trace_stat file."""
    (stats,) = sorted(directory.glob("*_.csv"))
    rows = stats.read_text().splitlines()
    header, last = rows[0].split(";"), rows[-1].split(";")
    return int(last[header.index("SuccessfulCall(C)")]), int(last[header.index("FailedCall(C)")])


async def place_calls(directory: Path, proxy: Proxy, calls: int, rate: int, limit: int) -> tuple[int, int]:
    directory.mkdir()
    audio = caller_audio(directory, "what time is it")
    path = scenario(directory, talk_ms=TALK_MS, media=stream(audio))
    # Generous: the calls take calls/rate seconds on an idle machine, and the machine is shared.
    timeout = 120 + 3 * (calls / rate + TALK_MS / 1000)
    result = await run_sipp(directory, path, proxy.target, timeout=timeout,
                            extra=["-m", str(calls), "-r", str(rate), "-l", str(limit), "-trace_stat", "-fd", "1"])
    result.check()
    return sipp_counts(directory)


async def ended(nodes: list[Node], total: int, timeout: float = 120) -> list[int]:
    """Each node's count of ended SIP calls, once together they reach `total` (metrics lag the BYE)."""
    deadline = time.monotonic() + timeout
    while True:
        counts = [await asyncio.to_thread(node.sip_calls_ended) for node in nodes]
        if sum(counts) >= total or time.monotonic() > deadline:
            return counts
        await asyncio.sleep(0.5)


async def settled(node: Node, before: Footprint | None = None, timeout: float = 60) -> Footprint:
    """The node's footprint once its calls have ended and, given `before`, it is back within reach of it
    (or whatever it is at the deadline: the caller's assertions say what is off)."""
    deadline = time.monotonic() + timeout
    while True:
        now = await asyncio.to_thread(footprint, node)
        back = now.sessions == 0 and now.rtp_sockets == 0 and (
            before is None or (now.tasks <= before.tasks + SLACK and now.files <= before.files + POOL_MAX + SLACK))
        if back or time.monotonic() > deadline:
            return now
        await asyncio.sleep(1.0)


async def test_calls_through_kamailio_to_two_nodes_all_succeed_and_leave_nothing_behind(
        tmp_path: Path, fresh_db: str) -> None:
    with cluster(tmp_path, fresh_db) as (proxy, nodes):
        # A few calls first, so what a node opens once (engine workers, database connections) is in the
        # baseline and only what the load leaves behind counts.
        assert await place_calls(tmp_path / "warm-up", proxy, WARM_UP_CALLS, RATE, LIMIT) == (WARM_UP_CALLS, 0)
        warm = await ended(nodes, WARM_UP_CALLS)
        assert sum(warm) == WARM_UP_CALLS, warm
        before = [await settled(node) for node in nodes]
        assert all(b.sessions == 0 and b.rtp_sockets == 0 for b in before), before

        assert await place_calls(tmp_path / "load", proxy, CALLS, RATE, LIMIT) == (CALLS, 0)
        counts = await ended(nodes, WARM_UP_CALLS + CALLS)
        shares = [count - warmed for count, warmed in zip(counts, warm, strict=True)]
        after = [await settled(node, b) for node, b in zip(nodes, before, strict=True)]

    assert sum(shares) == CALLS, f"the nodes ended {shares} of the {CALLS} calls"
    # Kamailio's dispatcher takes turns: each node about half; a quarter leaves room for retransmissions.
    assert all(share >= CALLS // 4 for share in shares), f"the nodes' shares of {CALLS} calls: {shares}"
    for node, b, a in zip(nodes, before, after, strict=True):
        assert a.sessions == 0, f"node {node.name} still has {a.sessions} sessions"
        assert a.rtp_sockets == 0, f"node {node.name} still holds {a.rtp_sockets} RTP/RTCP sockets"
        assert a.tasks <= b.tasks + SLACK, f"node {node.name}'s asyncio tasks grew from {b.tasks} to {a.tasks}"
        assert a.files <= b.files + POOL_MAX + SLACK, \
            f"node {node.name}'s open files grew from {b.files} to {a.files}"
