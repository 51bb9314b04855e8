"""A small voicegate cluster as it is deployed: two real `voicegate serve` processes sharing one
PostgreSQL and one owner_key_secret, and a real Kamailio (deploy/kamailio/kamailio.cfg) in front.

Everything is on loopback, but on two addresses: the caller (sipp) is 127.0.0.1 and Kamailio listens on
127.0.0.2, so a node that trusts only 127.0.0.2 really tells the proxy from the caller."""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.conftest import REPO, free_port
from tests.sip_calls.conftest import CALLER_PHRASES

KAMAILIO = "/usr/sbin/kamailio"
KAMAILIO_CFG = REPO / "deploy" / "kamailio" / "kamailio.cfg"
PROXY_IP = "127.0.0.2"
CALLER_IP = "127.0.0.1"
PROBE_INTERVAL_S = 2
OWNER_KEY_SECRET = "cluster-test-owner-key-secret-0123456789"
SCENARIO = Path(__file__).parent / "uac_call.xml"
MEMORY_PHRASES = ["remember that i like green tea", "what do you remember about me"]
# The node's speech engines: pocketsphinx (with the test phrases) and espeak-ng, cheap enough for load
# tests; or the offline defaults, Whisper tiny.en and Piper, one worker each, for tests that listen.
SPEECH = {
    "pocketsphinx": '[stt]\nprovider = "pocketsphinx"\n[tts]\nprovider = "espeak"\n',
    "whisper": '[stt]\nprovider = "whisper"\n[tts]\nprovider = "piper"\n[whisper]\nworkers = 1\n'
               '[piper]\nworkers = 1\n',
}


@dataclass
class Node:
    name: str
    directory: Path
    http_port: int
    sip_port: int
    speech: str = "pocketsphinx"  # a key of SPEECH
    drain_timeout_s: float = 30.0
    proc: subprocess.Popen[bytes] | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.directory / "serve.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def sip_uri(self) -> str:
        return f"sip:127.0.0.1:{self.sip_port}"

    def write_config(self, db_uri: str) -> Path:
        rtp_low = random.randrange(30000, 59000) & ~1
        phrases = ", ".join(f'"{p}"' for p in [*CALLER_PHRASES, *MEMORY_PHRASES])
        config = self.directory / "config.toml"
        config.write_text(f"""
[server]
host = "127.0.0.1"
port = {self.http_port}
data_dir = "{self.directory / 'data'}"
drain_timeout_s = {self.drain_timeout_s}
[sip]
enabled = true
bind = "127.0.0.1:{self.sip_port}"
transports = ["udp"]
trusted_peers = ["{PROXY_IP}/32"]
invite_rate_per_min = 0
# The memory test hears replies on a port of its own, not where sipp streams from.
symmetric_rtp = false
rtp_port_min = {rtp_low}
rtp_port_max = {rtp_low + 399}
[webrtc]
enabled = false
[pipeline]
greeting = ""
vad = "energy"
end_of_turn = "off"
vad_offset_ms = 500
[llm]
provider = "local"
{SPEECH[self.speech]}[pocketsphinx]
workers = 1
phrases = [{phrases}]
[espeak]
workers = 1
[memory]
enabled = true
provider = "pgvector"
embedding = "none"
owner_key_secret = "{OWNER_KEY_SECRET}"
[pgvector]
connection_string = "{db_uri}"
""")
        return config

    def start(self, db_uri: str) -> None:
        config = self.write_config(db_uri)
        env = {k: v for k, v in os.environ.items() if not k.startswith("VOICEGATE_")}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "server.cli", "--config", str(config), "serve"],
                                         cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)

    def wait_healthy(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"node {self.name} exited:\n{self.log.read_text(errors='replace')[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=3).status_code == 200:
                    return
            time.sleep(0.3)
        raise AssertionError(f"node {self.name} did not become healthy")

    def sip_calls_ended(self) -> int:
        """Calls this node has seen end (any outcome), from its own /metrics."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        pattern = r'^voicegate_calls_total\{[^}]*transport="sip"[^}]*\} ([0-9.]+)$'
        return int(sum(float(v) for v in re.findall(pattern, text, re.MULTILINE)))

    def kill(self) -> None:
        """kill -9: the node stops answering anything, as a crashed or unplugged machine would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)


@dataclass
class Proxy:
    directory: Path
    port: int
    nodes: list[Node]
    trunk_nets: str = f"{CALLER_IP}/32"
    pike_density: int = 2000  # far above what the load tests send from their one source
    proc: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        return f"{PROXY_IP}:{self.port}"

    @property
    def log(self) -> Path:
        return self.directory / "kamailio.log"

    def start(self) -> None:
        listing = self.directory / "dispatcher.list"
        listing.write_text("".join(f"1 {node.sip_uri}\n" for node in self.nodes))
        rundir = self.directory / "run"
        rundir.mkdir(exist_ok=True)
        args = [
            KAMAILIO, "-f", str(KAMAILIO_CFG), "-DD", "-E", "-Y", str(rundir), "-P", str(rundir / "kamailio.pid"),
            "-A", f"LISTEN=udp:{self.target}", "-A", f'DISPATCHER_LIST="{listing}"',
            "-A", f'TRUNK_NETS="{self.trunk_nets}"', "-A", f"PROBE_INTERVAL={PROBE_INTERVAL_S}",
            "-A", f"PIKE_DENSITY={self.pike_density}",
        ]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(args, cwd=self.directory, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not self.answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"kamailio did not start:\n{self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.3)

    def answers(self) -> bool:
        """Whether Kamailio replies to a request (it refuses a MESSAGE, which is all we need to know)."""
        return bool(self.send_messages(1, wait=1.0))

    def send_messages(self, count: int, wait: float = 3.0) -> list[str]:
        """Send `count` MESSAGE requests from the caller's address at once; the status lines that came back."""
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.bind((CALLER_IP, 0))
            port = sock.getsockname()[1]
            for _ in range(count):
                sock.sendto((f"MESSAGE sip:probe@{self.target} SIP/2.0\r\n"
                             f"Via: SIP/2.0/UDP {CALLER_IP}:{port};branch=z9hG4bK-{random.randrange(10**9)}\r\n"
                             f"From: <sip:probe@{CALLER_IP}>;tag=1\r\nTo: <sip:probe@{self.target}>\r\n"
                             f"Call-ID: probe-{random.randrange(10**9)}\r\nCSeq: 1 MESSAGE\r\n"
                             "Max-Forwards: 70\r\nContent-Length: 0\r\n\r\n").encode(), (PROXY_IP, self.port))
            replies: list[str] = []
            deadline = time.monotonic() + wait
            while len(replies) < count and time.monotonic() < deadline:
                sock.settimeout(max(0.05, deadline - time.monotonic()))
                try:
                    data = sock.recv(4096)
                except OSError:
                    break
                if data.startswith(b"SIP/2.0 "):
                    replies.append(data.split(b"\r\n", 1)[0].decode(errors="replace"))
            return replies

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)


def scenario(directory: Path, *, talk_ms: int = 300, media: str = "", from_user: str = "+15551234567",
             extra_header: str = "X-Test: 1", media_port: int | str = "[media_port]") -> Path:
    text = SCENARIO.read_text().replace("<!-- MEDIA -->", media)
    for key, value in {"FROM_USER": from_user, "EXTRA_HEADER": extra_header, "TALK_MS": talk_ms,
                       "MEDIA_PORT": media_port}.items():
        text = text.replace(key, str(value))
    path = directory / f"call-{random.randrange(10**9)}.xml"
    path.write_text(text)
    return path


@contextlib.contextmanager
def cluster(directory: Path, db_uri: str, count: int = 2, trunk_nets: str = f"{CALLER_IP}/32",
            pike_density: int = 2000, speech: str = "pocketsphinx",
            drain_timeout_s: float = 30.0) -> Iterator[tuple[Proxy, list[Node]]]:
    nodes = []
    for index in range(count):
        node_dir = directory / f"node-{'ab'[index]}"
        node_dir.mkdir()
        nodes.append(Node("ab"[index], node_dir, free_port(), free_port(), speech, drain_timeout_s))
    proxy_dir = directory / "proxy"
    proxy_dir.mkdir()
    proxy = Proxy(proxy_dir, free_port(), nodes, trunk_nets, pike_density)
    try:
        for node in nodes:
            node.start(db_uri)
        for node in nodes:
            node.wait_healthy()
        proxy.start()
        yield proxy, nodes
    finally:
        proxy.stop()
        for node in nodes:
            node.stop()
