"""Graceful drain and node identity, with real `voicegate serve` processes, real sipp calls and real signals.

A draining node (SIGTERM) answers OPTIONS, new INVITEs, WHIP POSTs and /health with 503, lets its live
calls finish (or ends them with our BYE at server.drain_timeout_s), then exits 0 on its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO
from tests.sip.conftest import SCENARIOS, eventually, free_port, run_sipp

pytestmark = pytest.mark.slow

HOLD_SCENARIO = Path(__file__).parent / "drain_scenarios" / "uac_hold_then_bye.xml"
PCMU_OFFER = "m=audio [media_port] RTP/AVP 0\n      a=rtpmap:0 PCMU/8000"


@dataclass
class Node:
    proc: subprocess.Popen[str]
    http: str
    sip_port: int
    log_path: Path

    def log_records(self) -> list[dict[str, Any]]:
        records = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                records.append(json.loads(line))
        return records


@pytest.fixture
def start_node(tmp_path: Path) -> Iterator[Any]:
    started: list[Node] = []

    def start(name: str, *, drain_timeout_s: float = 60.0, node_id: str = "") -> Node:
        port, sip_port, rtp = free_port(), free_port(), 30000 + (os.getpid() % 500) * 40 + len(started) * 20
        directory = tmp_path / name
        directory.mkdir()
        config = directory / "config.toml"
        config.write_text(
            f'[server]\nhost = "127.0.0.1"\nport = {port}\ndata_dir = "{directory / "data"}"\n'
            f'drain_timeout_s = {drain_timeout_s}\nnode_id = "{node_id}"\n'
            f'[sip]\nbind = "127.0.0.1:{sip_port}"\nrtp_port_min = {rtp}\nrtp_port_max = {rtp + 19}\n'
            f'[stt]\nprovider = "pocketsphinx"\n[pocketsphinx]\nworkers = 1\n[tts]\nprovider = "espeak"\n'
            f'[llm]\nprovider = "local"\n[memory]\nenabled = false\n[telemetry]\nlog_format = "json"\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith("VOICEGATE_")}
        log_path = directory / "stdout.log"
        with log_path.open("w") as out:  # a file, not a pipe nobody reads: the server never blocks on it
            proc = subprocess.Popen([sys.executable, "-m", "voicegate", "--config", str(config), "serve"],
                                    cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        node = Node(proc, f"http://127.0.0.1:{port}", sip_port, log_path)
        started.append(node)
        return node

    yield start
    for node in started:
        if node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait()


async def health(node: Node) -> httpx.Response:
    async with httpx.AsyncClient(timeout=5) as client:
        return await client.get(node.http + "/health")


async def wait_for_health(node: Node, check: Any, what: str, timeout: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        assert node.proc.poll() is None, f"the node exited early:\n{node.log_path.read_text()[-4000:]}"
        try:
            response = await health(node)
            if check(response):
                return dict(response.json())
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


def live_sessions(response: httpx.Response) -> int:
    return int(response.json()["components"]["sessions"]["live"])


def options_status(sip_port: int) -> int:
    """The status of the node's answer to an out-of-dialog OPTIONS (a dispatcher's keep-alive probe)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(5)
        local = sock.getsockname()[1]
        request = (
            f"OPTIONS sip:agent@127.0.0.1:{sip_port} SIP/2.0\r\n"
            f"Via: SIP/2.0/UDP 127.0.0.1:{local};branch=z9hG4bK-drain-{time.monotonic_ns()}\r\n"
            f"From: <sip:probe@127.0.0.1:{local}>;tag=probe\r\nTo: <sip:agent@127.0.0.1:{sip_port}>\r\n"
            f"Call-ID: probe-{time.monotonic_ns()}@127.0.0.1\r\nCSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\n"
            "Content-Length: 0\r\n\r\n")
        sock.sendto(request.encode(), ("127.0.0.1", sip_port))
        data, _ = sock.recvfrom(65535)
    status_line = data.decode(errors="replace").split("\r\n", 1)[0]
    assert status_line.startswith("SIP/2.0 "), status_line
    return int(status_line.split()[1])


def expect_final(tmp_path: Path, status: str) -> Path:
    text = (SCENARIOS / "uac_expect_final.xml").read_text()
    for key, value in {"EXTRA_HEADER": "X-Test: 1", "OFFER_MEDIA": PCMU_OFFER, "EXPECTED_STATUS": status,
                       "EXPECTED_REGEXP": "Retry-After: [0-9]+"}.items():
        text = text.replace(key, value)
    path = tmp_path / f"expect_{status}.xml"
    path.write_text(text)
    return path


async def wait_exit(node: Node, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while node.proc.poll() is None:
        assert time.monotonic() < deadline, "the node did not exit after its drain"
        await asyncio.sleep(0.2)
    return int(node.proc.returncode)


async def test_sigterm_refuses_new_calls_with_503_lets_the_live_call_finish_then_exits_0(
        start_node: Any, tmp_path: Path) -> None:
    node = start_node("a", drain_timeout_s=120)
    await wait_for_health(node, lambda r: r.status_code == 200, "the node to be healthy")
    assert await asyncio.to_thread(options_status, node.sip_port) == 200

    # The caller holds the call for 12 s, then hangs up: it must still be up when the probes below run.
    call = asyncio.create_task(run_sipp(tmp_path, HOLD_SCENARIO, f"127.0.0.1:{node.sip_port}",
                                        extra=["-d", "12000"], timeout=60))
    await wait_for_health(node, lambda r: live_sessions(r) == 1, "the call to be live")
    node.proc.send_signal(signal.SIGTERM)

    report = await wait_for_health(node, lambda r: r.status_code == 503, "/health to report the drain")
    assert report["draining"] is True and report["status"] == "draining"
    assert await asyncio.to_thread(options_status, node.sip_port) == 503
    (tmp_path / "refused").mkdir()
    (await run_sipp(tmp_path / "refused", expect_final(tmp_path, "503"), f"127.0.0.1:{node.sip_port}")).check()
    async with httpx.AsyncClient(timeout=5) as client:
        whip = await client.post(node.http + "/whip", content=b"v=0\r\n", headers={"Content-Type": "application/sdp"})
        metrics = (await client.get(node.http + "/metrics")).text
    assert whip.status_code == 503 and whip.json()["error"]["code"] == "draining"
    assert "Retry-After" in whip.headers
    for transport in ("sip", "webrtc"):  # each refusal counted with its reason (docs/scaling.md)
        assert f'voicegate_calls_refused_total{{reason="draining",transport="{transport}"}} 1' in metrics
    assert not call.done() and node.proc.poll() is None, "the live call and the node must carry on"

    (await call).check()  # the caller's BYE got its 200: the call ended normally
    assert await wait_exit(node) == 0
    messages = [record["message"] for record in node.log_records()]
    assert "drain complete: no live calls" in messages
    assert "drain deadline reached; ending the calls still up" not in messages


async def test_a_call_outliving_drain_timeout_gets_our_bye_and_the_node_exits_0(
        start_node: Any, tmp_path: Path) -> None:
    node = start_node("b", drain_timeout_s=2)
    await wait_for_health(node, lambda r: r.status_code == 200, "the node to be healthy")
    # This caller never hangs up: it waits for our BYE and answers it 200.
    call = asyncio.create_task(run_sipp(tmp_path, SCENARIOS / "uac_wait_bye.xml", f"127.0.0.1:{node.sip_port}",
                                        timeout=60))
    await wait_for_health(node, lambda r: live_sessions(r) == 1, "the call to be live")
    signalled = time.monotonic()
    node.proc.send_signal(signal.SIGTERM)

    (await call).check()
    assert time.monotonic() - signalled >= 1.5, "the BYE came before drain_timeout_s"
    assert await wait_exit(node) == 0
    assert "drain deadline reached; ending the calls still up" in [r["message"] for r in node.log_records()]


async def test_a_second_sigterm_during_the_drain_stops_the_node_now(start_node: Any, tmp_path: Path) -> None:
    node = start_node("c", drain_timeout_s=120)
    await wait_for_health(node, lambda r: r.status_code == 200, "the node to be healthy")
    call = asyncio.create_task(run_sipp(tmp_path, SCENARIOS / "uac_wait_bye.xml", f"127.0.0.1:{node.sip_port}",
                                        timeout=60))
    await wait_for_health(node, lambda r: live_sessions(r) == 1, "the call to be live")
    node.proc.send_signal(signal.SIGTERM)
    await wait_for_health(node, lambda r: r.status_code == 503, "/health to report the drain")
    node.proc.send_signal(signal.SIGTERM)

    (await call).check()  # stopping now still ends the call properly: our BYE, answered 200
    assert await wait_exit(node, timeout=30) == 0


async def test_two_nodes_name_themselves_in_health_metrics_and_every_log_line(start_node: Any) -> None:
    nodes = [start_node("one", node_id="node-one"), start_node("two", node_id="node-two")]
    for node, name in zip(nodes, ("node-one", "node-two"), strict=True):
        report = await wait_for_health(node, lambda r: r.status_code == 200, f"{name} to be healthy")
        assert report["node_id"] == name and report["draining"] is False
        async with httpx.AsyncClient(timeout=5) as client:
            metrics = (await client.get(node.http + "/metrics")).text
        assert f'voicegate_node_info{{node_id="{name}"}} 1' in metrics
    for node, name in zip(nodes, ("node-one", "node-two"), strict=True):
        node.proc.send_signal(signal.SIGTERM)
        assert await wait_exit(node) == 0
        records = node.log_records()
        assert any(record["message"] == "voicegate is ready" for record in records)
        assert records and {record.get("node_id") for record in records} == {name}


async def test_an_unset_node_id_is_the_hostname_with_a_suffix_kept_for_the_whole_run(start_node: Any) -> None:
    node = start_node("default")
    report = await wait_for_health(node, lambda r: r.status_code == 200, "the node to be healthy")
    node_id = report["node_id"]
    host = socket.gethostname()
    assert node_id.startswith(host[:48] + "-") and len(node_id) == len(host[:48]) + 5  # "-" and 4 hex digits
    node.proc.send_signal(signal.SIGTERM)
    assert await wait_exit(node) == 0
    await eventually(lambda: bool(node.log_records()), what="log lines")
    assert {record.get("node_id") for record in node.log_records()} == {node_id}
