"""Kamailio (deploy/kamailio/kamailio.cfg) in front of two real voicegate nodes sharing one PostgreSQL:
calls spread over both, a dead node's calls end and new calls go to the survivor, and a caller outside
the trunks gets no identity. Memory across nodes, erasure and drain are in test_lifecycle.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.cluster.harness import PROBE_INTERVAL_S, Node, Proxy, cluster, scenario
from tests.scale import scaled
from tests.sip.conftest import SippResult, run_sipp

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]


def sipp_counts(directory: Path) -> tuple[int, int]:
    """(successful, failed) calls by sipp's own account: the last line of its -trace_stat file."""
    (stats,) = sorted(directory.glob("*_.csv"))
    rows = stats.read_text().splitlines()
    header, last = rows[0].split(";"), rows[-1].split(";")
    return int(last[header.index("SuccessfulCall(C)")]), int(last[header.index("FailedCall(C)")])


async def many_calls(directory: Path, proxy: Proxy, calls: int, *, talk_ms: int, rate: int = 4,
                     limit: int = 10) -> SippResult:
    directory.mkdir()
    return await run_sipp(directory, scenario(directory, talk_ms=talk_ms), proxy.target, timeout=240,
                          extra=["-m", str(calls), "-r", str(rate), "-l", str(limit), "-trace_stat", "-fd", "1"])


async def ended_on(nodes: list[Node], total: int) -> list[int]:
    """Each node's count of ended SIP calls, once together they reach `total` (metrics lag the BYE)."""
    deadline = time.monotonic() + 60
    while True:
        counts = [await asyncio.to_thread(node.sip_calls_ended) for node in nodes]
        if sum(counts) >= total or time.monotonic() > deadline:
            return counts
        await asyncio.sleep(0.5)


SPREAD_CALLS = scaled(20, 40)


@pytest.mark.soak
async def test_calls_through_kamailio_all_succeed_and_both_nodes_take_some(
        tmp_path: Path, fresh_db: str) -> None:
    """`make test` places 20 calls (4 a second, 10 at a time); `make soak` 400 (ten times the full 40)."""
    with cluster(tmp_path, fresh_db) as (proxy, nodes):
        result = await many_calls(tmp_path / "sipp", proxy, SPREAD_CALLS, talk_ms=500)
        result.check()
        assert sipp_counts(tmp_path / "sipp") == (SPREAD_CALLS, 0)
        a, b = await ended_on(nodes, SPREAD_CALLS)
    assert a + b == SPREAD_CALLS, f"node a ended {a} calls, node b {b}"
    # Round-robin: each node gets about half; "some" leaves room for retransmissions and probes.
    assert min(a, b) >= SPREAD_CALLS // 4, f"node a ended {a} calls, node b {b}"


async def test_a_killed_node_loses_only_its_calls_and_new_calls_go_to_the_other(
        tmp_path: Path, fresh_db: str) -> None:
    with cluster(tmp_path, fresh_db) as (proxy, nodes):
        node_a, node_b = nodes
        # Ten long calls, half on each node; node a dies while they are all up.
        first = asyncio.create_task(many_calls(tmp_path / "during", proxy, 10, talk_ms=12000, rate=5))
        deadline = time.monotonic() + 60
        while sum(live := [await asyncio.to_thread(live_sip_calls, n) for n in nodes]) < 10:
            assert time.monotonic() < deadline and not first.done(), f"live calls: {live}"
            await asyncio.sleep(0.25)
        assert live[0] >= 1, live  # node a carries some of them
        node_a.kill()
        await first
        ok, failed = sipp_counts(tmp_path / "during")
        (survived,) = await ended_on([node_b], ok)
        assert ok + failed == 10
        assert failed >= 1, "node a carried calls, and they cannot have finished"
        assert ok == survived, f"sipp completed {ok} calls, node b ended {survived}: only a's calls failed"

        # After the probe interval Kamailio knows a is down: every new call is taken by b.
        await asyncio.sleep(2 * PROBE_INTERVAL_S + 1)
        result = await many_calls(tmp_path / "after", proxy, 20, talk_ms=300)
        result.check()
        assert sipp_counts(tmp_path / "after") == (20, 0)
        (total,) = await ended_on([node_b], survived + 20)
        assert total == survived + 20


# Node a's admission holds no call: one core at the 0.75 target, every call 0.8 of a core (fixed, not
# measured), so it refuses every INVITE with 503 + Retry-After, as a node past its capacity does.
FULL_NODE = "[admission]\ncores = 1\ncall_cost = 0.8\nmeasure_cost = false\n"


async def test_a_call_the_full_node_refuses_lands_on_the_other(tmp_path: Path, fresh_db: str) -> None:
    with cluster(tmp_path, fresh_db, extra=[FULL_NODE]) as (proxy, nodes):
        node_a, node_b = nodes
        result = await many_calls(tmp_path / "sipp", proxy, 6, talk_ms=300, rate=2, limit=2)
        result.check()
        assert sipp_counts(tmp_path / "sipp") == (6, 0)  # every caller was answered, none heard the 503
        (taken,) = await ended_on([node_b], 6)
        assert taken == 6
        assert await asyncio.to_thread(node_a.sip_calls_ended) == 0
        metrics = (await asyncio.to_thread(httpx.get, f"{node_a.url}/metrics", timeout=10)).text
        refused = [line for line in metrics.splitlines() if line.startswith("voicegate_calls_refused_total{")]
        # Round-robin offered node a about half the calls; each was refused there and failed over to b.
        assert refused and all('reason="capacity"' in line and 'transport="sip"' in line for line in refused)
        assert sum(float(line.rsplit(" ", 1)[1]) for line in refused) >= 1


def live_sip_calls(node: Node) -> int:
    """The node's live SIP calls, from its own /metrics."""
    text = httpx.get(f"{node.url}/metrics", timeout=10).text
    found = [line.rsplit(" ", 1)[1] for line in text.splitlines()
             if line.startswith("voicegate_live_sessions{") and 'transport="sip"' in line]
    return int(sum(float(v) for v in found))


def memory_decisions(node: Node) -> list[str]:
    """Per call, how the node's memory saw the caller: "loaded", or why the caller stayed anonymous."""
    found = []
    for line in node.log.read_text(errors="replace").splitlines():
        if line.startswith("{") and ("caller memory" in line or "anonymous caller: no memory" in line):
            entry = json.loads(line)
            found.append(entry.get("reason", "loaded"))
    return found


async def test_a_caller_outside_the_trunks_cannot_assert_an_identity_nor_flood(
        tmp_path: Path, fresh_db: str) -> None:
    with cluster(tmp_path, fresh_db, count=1, trunk_nets="192.0.2.0/24", pike_density=30) as (proxy, (node,)):
        directory = tmp_path / "forged"
        directory.mkdir()
        # The trusted proxy forwards this INVITE; the node must still not believe either number in it.
        path = scenario(directory, extra_header="P-Asserted-Identity: <tel:+15559876543>")
        (await run_sipp(directory, path, proxy.target, timeout=60)).check()
        assert await ended_on([node], 1) == [1]

        # The same source then sends 200 requests at once: pike lets the first through (Kamailio's own
        # 405 for a MESSAGE) and refuses the rest of the burst with 503.
        await asyncio.sleep(5)  # past pike's window, so the call's requests do not count
        replies = await asyncio.to_thread(proxy.send_messages, 200)
    assert memory_decisions(node) == ["anonymous caller"]
    assert replies and replies[0].startswith("SIP/2.0 405"), replies[:3]
    assert sum(r.startswith("SIP/2.0 503") for r in replies) >= 100, replies


def forged_in_dialog(proxy: Proxy, next_hop: str, source: socket.socket) -> str:
    """A to-tagged INVITE (as if a re-INVITE) whose Route names the proxy and whose Request-URI is
    `next_hop`, carrying the sender's own P-Asserted-Identity: Kamailio's answer, or "" for none."""
    port = source.getsockname()[1]
    tag = secrets.token_hex(4)
    source.sendto((f"INVITE sip:victim@{next_hop} SIP/2.0\r\n"
                   f"Via: SIP/2.0/UDP 127.0.0.1:{port};branch=z9hG4bK-{tag}\r\n"
                   f"Route: <sip:{proxy.target};lr>\r\n"
                   f"From: <sip:+15551234567@forged.invalid>;tag={tag}\r\nTo: <sip:victim@{next_hop}>;tag=theirs\r\n"
                   f"Call-ID: forged-{tag}\r\nCSeq: 2 INVITE\r\nMax-Forwards: 70\r\n"
                   "P-Asserted-Identity: <sip:+15551234567@trusted.invalid>\r\nContent-Length: 0\r\n\r\n").encode(),
                  ("127.0.0.2", proxy.port))
    source.settimeout(5)
    try:
        while True:
            data = source.recv(4096)
            if not data.startswith(b"SIP/2.0 1"):
                return data.split(b"\r\n", 1)[0].decode(errors="replace")
    except OSError:
        return ""


async def test_a_forged_route_cannot_send_an_in_dialog_request_past_the_proxy_to_another_host(
        tmp_path: Path, fresh_db: str) -> None:
    """The proxy is a trusted address to the nodes (and maybe to others): an in-dialog request from a
    caller may only go to a node, never to a host its own Route or Request-URI names."""
    with cluster(tmp_path, fresh_db, count=1, trunk_nets="192.0.2.0/24") as (proxy, (node,)), \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as victim, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as caller:
        victim.bind(("127.0.0.5", 0))
        caller.bind(("127.0.0.1", 0))
        answer = await asyncio.to_thread(forged_in_dialog, proxy, f"127.0.0.5:{victim.getsockname()[1]}", caller)
        victim.settimeout(2)
        with contextlib.suppress(TimeoutError):
            leaked = victim.recv(4096)
            raise AssertionError(f"the proxy relayed a forged in-dialog request:\n{leaked.decode(errors='replace')}")
        assert answer.startswith("SIP/2.0 403"), answer
        # A real call's in-dialog requests (ACK, BYE) still reach its node.
        directory = tmp_path / "call"
        directory.mkdir()
        (await run_sipp(directory, scenario(directory), proxy.target, timeout=60)).check()
        assert await ended_on([node], 1) == [1]
