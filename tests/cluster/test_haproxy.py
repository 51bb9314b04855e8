"""HAProxy (deploy/haproxy/haproxy.cfg) in front of two real nodes' HTTP side: a browser call and its
resume stay on the node that holds the session, the rest goes to any node, health checks take a
draining node out, and rate limits count per client behind the proxy (server.trusted_proxies)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.common.cluster import Haproxy
from tests.cluster.harness import LIGHT_ENGINES, Node, running
from tests.conftest import free_port
from tests.speech import write_wav
from tests.webrtc.conftest import WAV_RATE, room_noise
from tests.webrtc.harness import WhipClient
from tests.webrtc.test_browser import CHROMIUM, UI_TIMEOUT_MS, browser_page
from voicegate.internal.identity.jwt import mint_token

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

JWT_SECRET = "cluster-test-jwt-secret-of-enough-length"
# One request per line: "client:port [date] frontend backend/server timings status bytes method path".
LOG_LINE = re.compile(r"voicegate_nodes/(?P<server>\S+) \S+ (?P<status>\d{3}) \d+ (?P<method>[A-Z]+) (?P<path>\S+)$")


class WebNode(Node):
    """A cluster node that takes browser calls (the SIP tests' nodes have WebRTC off)."""

    whip_rate_per_min = 30
    jwt_secret = ""  # with one, every browser call must bring a token

    def write_config(self, db_uri: str) -> Path:
        config = self.directory / "config.toml"
        config.write_text(f"""
[server]
jwt_secret = "{self.jwt_secret}"
whip_rate_per_min = {self.whip_rate_per_min}
session_grace_ms = 120000
drain_timeout_s = 60
[webrtc]
enabled = true
[pipeline]
greeting = ""
vad = "energy"
end_of_turn = "off"
{LIGHT_ENGINES}[pocketsphinx]
workers = 1
phrases = ["say hello world"]
""")
        return config


@contextlib.contextmanager
def web_cluster(directory: Path, db_uri: str, whip_rate_per_min: int = 30,
                jwt_secret: str = "") -> Iterator[tuple[Haproxy, list[Node]]]:
    nodes: list[Node] = []
    for name in "ab":
        node_dir = directory / f"node-{name}"
        node_dir.mkdir()
        node = WebNode(name, node_dir, free_port(), free_port())
        node.whip_rate_per_min, node.jwt_secret = whip_rate_per_min, jwt_secret
        nodes.append(node)
    balancer_dir = directory / "haproxy"
    balancer_dir.mkdir()
    balancer = Haproxy(balancer_dir, free_port(), [node.http_address for node in nodes])
    with running(nodes, db_uri, balancer):
        yield balancer, nodes


def served(balancer: Haproxy, method: str, path: str) -> list[tuple[str, int]]:
    """(node, status) of each logged request with this method and path, in order."""
    rows = []
    for line in balancer.log.read_text(errors="replace").splitlines():
        match = LOG_LINE.search(line)
        if match and match["method"] == method and match["path"] == path:
            rows.append((match["server"], int(match["status"])))
    return rows


async def logged(balancer: Haproxy, method: str, path: str, count: int) -> list[tuple[str, int]]:
    """HAProxy writes a request's line when it ends; wait for `count` of them."""
    for _ in range(100):
        rows = served(balancer, method, path)
        if len(rows) >= count:
            return rows
        await asyncio.sleep(0.1)
    raise AssertionError(f"HAProxy logged {served(balancer, method, path)} for {method} {path}")


async def test_a_browser_call_and_its_resumes_stay_on_the_node_that_holds_the_session(
        tmp_path: Path, fresh_db: str) -> None:
    from playwright.async_api import async_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is not installed (make test installs it)"
    wav = write_wav(tmp_path / "quiet.wav", room_noise(60_000), WAV_RATE)  # a quiet microphone
    with web_cluster(tmp_path, fresh_db) as (balancer, _nodes):
        async with async_playwright() as playwright, browser_page(playwright, tmp_path, wav) as page:
            await page.goto(balancer.url + "/")
            await page.get_by_role("button", name="Call").click()
            await page.locator("#connection", has_text="Connected").wait_for(timeout=UI_TIMEOUT_MS)
            await page.get_by_label("Type a turn").fill("say hello world")
            await page.get_by_role("button", name="Send").click()
            await page.locator("#transcript .line.agent", has_text="Hello world.").wait_for(timeout=UI_TIMEOUT_MS)
            for _ in range(2):  # round-robin alone would send one of these two redials to the other node
                await page.reload()
                await page.get_by_role("button", name="Call").click()
                await page.locator("#connection", has_text="resumed").wait_for(timeout=UI_TIMEOUT_MS)
            await page.get_by_label("Type a turn").fill("say hello world")
            await page.get_by_role("button", name="Send").click()
            await page.locator("#transcript .line.agent", has_text="Hello world.").wait_for(timeout=UI_TIMEOUT_MS)
            await page.get_by_role("button", name="Hang up").click()
        posts = await logged(balancer, "POST", "/whip", 3)
        assert [status for _, status in posts] == [201, 201, 201]
        assert len({node for node, _ in posts}) == 1, f"the call and its resumes went to {posts}"
        # Round-robin sent the page's other requests to both nodes: the stickiness is HAProxy's doing.
        assert {node for node, _ in served(balancer, "GET", "/")} == {"node-a", "node-b"}
        holder = posts[0][0]
        deletes = _session_requests(balancer, "DELETE")  # Hang up: DELETE /whip/<session>
        assert deletes == [(holder, 200)], deletes
    log = balancer.log.read_text(errors="replace")
    assert "resume=" not in log, "HAProxy's log must not hold resume tokens"


def _session_requests(balancer: Haproxy, method: str) -> list[tuple[str, int]]:
    rows = []
    for line in balancer.log.read_text(errors="replace").splitlines():
        match = LOG_LINE.search(line)
        if match and match["method"] == method and match["path"].startswith("/whip/"):
            rows.append((match["server"], int(match["status"])))
    return rows


async def test_the_memory_api_answers_from_any_node_and_a_draining_node_keeps_only_its_own_sessions(
        tmp_path: Path, fresh_db: str) -> None:
    token = mint_token(JWT_SECRET, "alice", issuer="voicegate", audience="voicegate", ttl_s=600)
    headers = {"Authorization": f"Bearer {token}"}
    with web_cluster(tmp_path, fresh_db, jwt_secret=JWT_SECRET) as (balancer, nodes):
        async with httpx.AsyncClient(base_url=balancer.url, headers=headers, timeout=30) as http:
            for _ in range(4):
                response = await http.get("/api/memory")
                assert response.status_code == 200, response.text
            assert {node for node, _ in await logged(balancer, "GET", "/api/memory", 4)} == {"node-a", "node-b"}

            caller = WhipClient()  # a live browser call keeps its node draining instead of exiting
            try:
                assert (await caller.dial(http)).status_code == 201
                ((holder_name, _),) = await logged(balancer, "POST", "/whip", 1)
                holder = next(node for node in nodes if f"node-{node.name}" == holder_name)
                assert holder.proc is not None
                holder.proc.send_signal(signal.SIGTERM)  # a drain: /health answers 503 while the call lasts
                for _ in range(60):  # HAProxy checks every 2 s and needs two failures
                    if f"{holder_name} is DOWN" in balancer.log.read_text(errors="replace"):
                        break
                    await asyncio.sleep(0.5)
                assert f"{holder_name} is DOWN" in balancer.log.read_text(errors="replace")
                assert holder.proc.poll() is None, "the draining node still carries its call"

                before = len(served(balancer, "GET", "/api/memory"))
                for _ in range(6):
                    response = await http.get("/api/memory")
                    assert response.status_code == 200, response.text
                after = (await logged(balancer, "GET", "/api/memory", before + 6))[before:]
                assert holder_name not in {node for node, _ in after}, after
                # ... but the session stuck to it still reaches it (option persist): its hang-up ends the drain.
                assert (await caller.hang_up(http)).status_code == 200
                assert _session_requests(balancer, "DELETE") == [(holder_name, 200)]
            finally:
                await caller.close()
            assert await asyncio.to_thread(holder.proc.wait, 60) == 0


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory, module_db: str) -> Iterator[Haproxy]:
    """Two nodes allowing two browser calls a minute per client, behind HAProxy: shared by the rate-limit
    tests, each with client addresses of its own (a client's allowance is its own, which they prove)."""
    with web_cluster(tmp_path_factory.mktemp("limited"), module_db, whip_rate_per_min=2) as (balancer, _nodes):
        yield balancer


async def test_rate_limits_count_each_client_behind_the_proxy_not_the_proxy(limited: Haproxy) -> None:
    balancer = limited

    def client(source: str) -> httpx.AsyncClient:
        transport = httpx.AsyncHTTPTransport(local_address=source)
        return httpx.AsyncClient(base_url=balancer.url, transport=transport, timeout=30)

    # A text/plain POST /whip passes the rate limit and is then refused 415: cheap, no WebRTC.
    async with client("127.0.0.1") as first, client("127.0.0.3") as second:
        statuses = [(await first.post("/whip", content="x", headers={"Content-Type": "text/plain"})).status_code
                    for _ in range(6)]
        assert 429 in statuses and statuses[0] == 415, statuses  # two per node per minute, then 429
        other = await second.post("/whip", content="x", headers={"Content-Type": "text/plain"})
        assert other.status_code == 415, "another client behind the proxy has its own allowance"


async def test_a_forged_x_forwarded_for_neither_escapes_the_limit_nor_spends_a_victims(limited: Haproxy) -> None:
    """HAProxy appends its own X-Forwarded-For line after the client's: each forged value must not be a
    bucket of its own, and naming another client must not spend that client's allowance."""
    balancer = limited

    def client(source: str) -> httpx.AsyncClient:
        transport = httpx.AsyncHTTPTransport(local_address=source)
        return httpx.AsyncClient(base_url=balancer.url, transport=transport, timeout=30)

    async with client("127.0.0.5") as attacker, client("127.0.0.4") as victim:
        statuses = []
        for n in range(8):
            claim = f"198.51.100.{n}" if n % 2 else "127.0.0.4"  # a fresh address, or the victim's
            forged = {"Content-Type": "text/plain", "X-Forwarded-For": claim}
            statuses.append((await attacker.post("/whip", content="x", headers=forged)).status_code)
        assert statuses.count(415) <= 4 and 429 in statuses, statuses  # two per node, whatever it claims
        mine = await victim.post("/whip", content="x", headers={"Content-Type": "text/plain"})
        assert mine.status_code == 415, "the attacker spent the client it named"
