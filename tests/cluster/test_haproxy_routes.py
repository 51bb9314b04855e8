"""HAProxy's two special routes (deploy/haproxy/haproxy.cfg), through the real haproxy binary:

- a bring-your-own agent's X-Voicegate-Call-Token passes through it (every other X-Voicegate-* header is
  still dropped) and finds the node hosting the call, whichever node round-robin picks first;
- POST /calls, which may wait out a phone-menu walk (`"wait_for_menu": true`), gets a server timeout
  longer than that walk, while every other request keeps the short one. The shipped numbers are checked
  against the settings they must outlast; the routing is shown with a copy of the file whose timeouts are
  scaled down, in front of two small HTTP servers that answer after longer than the short timeout."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.common.cluster import HAPROXY, HAPROXY_CFG, LOCAL_IP, Haproxy, stop_process, wait_until
from tests.cluster.harness import Node, running
from tests.cluster.test_haproxy import JWT_SECRET, WebNode, logged
from tests.conftest import free_port
from tests.fakes.agent_fake import FakeAgent
from tests.webrtc.harness import WhipClient
from voicegate.internal.config import Config
from voicegate.internal.identity.jwt import mint_token
from voicegate.internal.memory.call_access import CALL_TOKEN_HEADER
from voicegate.server.routes_calls import AMD_SLACK_S

SHIPPED = HAPROXY_CFG.read_text()
LONG_TIMEOUT = re.compile(r"^(\s*http-request set-timeout server )(\d+)s( if \{ method POST \} \{ path /calls \})$",
                          re.MULTILINE)
DEFAULT_TIMEOUT = re.compile(r"^(\s*timeout (?:server|client) )(\d+)s$", re.MULTILINE)
SLOW_S = 4.0  # how long the scaled test's servers take to answer
MARGIN_S = 30  # the long timeout's room beyond the longest POST /calls the settings allow


def longest_post_calls_s(config: Config) -> float:
    """The longest POST /calls with "wait_for_menu": true can last (server/routes_calls.py): the callee
    answers within sip.outbound.timeout_s, answering-machine detection decides within max_decision_ms
    plus its slack, then the menu walk ends within menus.max_s plus the same slack."""
    return (config.sip.outbound.timeout_s + config.amd.max_decision_ms / 1000 + AMD_SLACK_S
            + config.menus.max_s + AMD_SLACK_S)


def test_the_shipped_post_calls_timeout_outlasts_a_menu_walk_and_only_that_route_has_it() -> None:
    (long_s,) = [int(m[2]) for m in LONG_TIMEOUT.finditer(SHIPPED)]
    defaults = {int(m[2]) for m in DEFAULT_TIMEOUT.finditer(SHIPPED)}
    assert long_s >= longest_post_calls_s(Config()) + MARGIN_S, long_s
    assert defaults and max(defaults) < longest_post_calls_s(Config()), "the short timeouts stay short"


class SlowNode(BaseHTTPRequestHandler):
    """Answers /health at once, /echo at once with the headers it got, and everything else after SLOW_S,
    naming the request it got."""

    def do_GET(self) -> None:
        if self.path == "/health":
            self._answer({"ok": True})
        elif self.path == "/echo":
            self._answer({"headers": {name.lower(): value for name, value in self.headers.items()}})
        else:
            time.sleep(SLOW_S)
            self._answer({"method": "GET", "path": self.path})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        time.sleep(SLOW_S)
        self._answer({"method": "POST", "path": self.path})

    def _answer(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """HAProxy closes health checks and timed-out requests without reading the answer: expected."""


@contextlib.contextmanager
def slow_nodes(count: int) -> Iterator[list[str]]:
    servers = [QuietServer((LOCAL_IP, 0), SlowNode) for _ in range(count)]
    threads = [threading.Thread(target=server.serve_forever, daemon=True) for server in servers]
    for thread in threads:
        thread.start()
    try:
        yield [f"{LOCAL_IP}:{server.server_address[1]}" for server in servers]
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def scaled(short_s: int, long_s: int) -> str:
    """The shipped file with its client and server timeouts at `short_s` and POST /calls' at `long_s`."""
    text, count = DEFAULT_TIMEOUT.subn(rf"\g<1>{short_s}s", SHIPPED)
    assert count == 2, "timeout client and timeout server in defaults"
    text, count = LONG_TIMEOUT.subn(rf"\g<1>{long_s}s\g<3>", text)
    assert count <= 1  # none: POST /calls has the short timeout too (the test then shows its 504)
    return text


@contextlib.contextmanager
def haproxy(directory: Path, config: str, nodes: list[str]) -> Iterator[str]:
    cfg, log = directory / "haproxy.cfg", directory / "haproxy.log"
    cfg.write_text(config)
    port = free_port()
    env = {"VG_HTTP_BIND": f"{LOCAL_IP}:{port}", "VG_NODE_A": nodes[0], "VG_NODE_B": nodes[1], "PATH": "/usr/bin:/bin"}
    url = f"http://{LOCAL_IP}:{port}"

    def routes() -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{url}/health", timeout=3).status_code == 200
        return False

    with log.open("ab") as out:
        proc = subprocess.Popen([HAPROXY, "-db", "-W", "-f", str(cfg)], cwd=directory, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        wait_until(routes, "haproxy routing to a healthy node", 60, proc, log)
        yield url
    finally:
        stop_process(proc, 15)


@pytest.mark.timeout(120)
def test_post_calls_outlasts_the_short_server_timeout_and_nothing_else_does(tmp_path: Path) -> None:
    with slow_nodes(2) as nodes, haproxy(tmp_path, scaled(short_s=1, long_s=60), nodes) as url:
        with httpx.Client(base_url=url, timeout=90) as http:
            placed = http.post("/calls", json={"to": "sip:+15551234567@trunk.example.com", "wait_for_menu": True})
            assert placed.status_code == 200 and placed.json()["path"] == "/calls", placed.text
            # The path is matched, not the query string.
            assert http.post("/calls?x=1", json={}).status_code == 200
            # Everything else keeps the short timeout: the balancer answers 504 after it.
            assert http.get("/calls").status_code == 504
            assert http.post("/api/memory", json={}).status_code == 504
            assert http.get("/").status_code == 504


def test_the_call_token_is_the_only_x_voicegate_header_let_through(tmp_path: Path) -> None:
    sent = {CALL_TOKEN_HEADER: "kq3v-a-call-token", "X-Voicegate-Resource-Id": "alice",
            "X-Voicegate-Proxy-Secret": "a-guessed-secret-of-length", "X-Voicegate-Caller-Id": "bob"}
    with slow_nodes(2) as nodes, haproxy(tmp_path, SHIPPED, nodes) as url:
        echoed = httpx.get(f"{url}/echo", headers=sent, timeout=30)
        assert echoed.status_code == 200, echoed.text
        got = {name: value for name, value in echoed.json()["headers"].items() if name.startswith("x-voicegate-")}
        assert got == {CALL_TOKEN_HEADER.lower(): "kq3v-a-call-token"}
        without = httpx.get(f"{url}/echo", headers={"X-Voicegate-Resource-Id": "alice"}, timeout=30)
        assert not [name for name in without.json()["headers"] if name.startswith("x-voicegate-")]
    assert "kq3v-a-call-token" not in (tmp_path / "haproxy.log").read_text(errors="replace")


TOKEN_LINE = re.compile(r"voicegate_call_token/(?P<server>\S+) \S+ (?P<status>\d{3}) \d+ (?P<method>[A-Z]+) "
                        r"(?P<path>\S+)$")


async def token_requests(balancer: Haproxy, method: str, path: str, count: int) -> list[str]:
    """The node that finally answered each call-token request with this method and path, once HAProxy
    has logged `count` of them (it writes a request's line when the request ends)."""
    for _ in range(100):
        rows = [TOKEN_LINE.search(line) for line in balancer.log.read_text(errors="replace").splitlines()]
        nodes = [row["server"] for row in rows if row and row["method"] == method and row["path"] == path]
        if len(nodes) >= count:
            return nodes
        await asyncio.sleep(0.1)
    raise AssertionError(f"HAProxy logged {nodes} for {method} {path}")


class AgentNode(WebNode):
    """A node whose agent is a bring-your-own one (FakeAgent), and whose browser callers bring a JWT, so
    each call's agent requests carry `memory_access`."""

    jwt_secret = JWT_SECRET
    agent_url = ""

    def write_config(self, db_uri: str) -> Path:
        config = self.directory / "config.toml"
        config.write_text(f"""
[server]
jwt_secret = "{self.jwt_secret}"
session_grace_ms = 120000
[webrtc]
enabled = true
[pipeline]
greeting = ""
vad = "energy"
end_of_turn = "off"
[llm]
provider = "agent"
[agent]
url = "{self.agent_url}"
[stt]
provider = "pocketsphinx"
[tts]
provider = "espeak"
[espeak]
workers = 1
[pocketsphinx]
workers = 1
phrases = ["say hello world"]
[memory]
embedding = "none"
""")
        return config


@pytest.mark.slow
@pytest.mark.timeout(420)
async def test_a_byo_agents_call_token_passes_the_balancer_to_the_node_hosting_the_call(
        tmp_path: Path, fresh_db: str) -> None:
    token = mint_token(JWT_SECRET, "alice", issuer="voicegate", audience="voicegate", ttl_s=600)
    async with FakeAgent(reply="Noted.") as agent:
        nodes: list[Node] = []
        for name in "ab":
            (tmp_path / f"node-{name}").mkdir()
            node = AgentNode(name, tmp_path / f"node-{name}", free_port(), free_port())
            node.agent_url = agent.url + "/agent"
            nodes.append(node)
        (tmp_path / "haproxy").mkdir()
        balancer = Haproxy(tmp_path / "haproxy", free_port(), [node.http_address for node in nodes])
        with running(nodes, fresh_db, balancer):
            async with httpx.AsyncClient(base_url=balancer.url, timeout=30) as http:
                caller = WhipClient()
                try:
                    assert (await caller.dial(http, token=token)).status_code == 201
                    await caller.wait_channel_open()
                    caller.send({"type": "text", "text": "say hello world"})
                    await caller.wait_said("Noted")
                    access = agent.requests[-1].body["memory_access"]
                    assert access["header"] == CALL_TOKEN_HEADER
                    call_token = {CALL_TOKEN_HEADER: access["token"]}
                    ((holder, _),) = await logged(balancer, "POST", "/whip", 1)
                    # Round-robin alone would send every other one of these to the node without the call.
                    for _ in range(4):
                        read = await http.get("/api/memory", headers=call_token)
                        assert read.status_code == 200, read.text
                    edit = await http.patch("/api/memory", headers=call_token,
                                            json={"document": "user", "action": "append", "content": "- Prefers tea."})
                    assert edit.status_code == 200, edit.text
                    # Each ended on the holder (after a 401 from the other node, for every other one).
                    assert await token_requests(balancer, "GET", "/api/memory", 4) == [holder] * 4
                    assert await token_requests(balancer, "PATCH", "/api/memory", 1) == [holder]
                    assert (await caller.hang_up(http, {"Authorization": f"Bearer {token}"})).status_code == 200
                    # Once the call has ended, no node takes its token.
                    ended = await http.get("/api/memory", headers=call_token)
                    assert ended.status_code == 401, ended.text
                finally:
                    await caller.close()
        assert access["token"] not in balancer.log.read_text(errors="replace"), "HAProxy's log holds no token"
