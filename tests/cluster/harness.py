"""A small voicegate cluster as it is deployed: two real `voicegate serve` processes sharing one
PostgreSQL and one owner_key_secret, and a real Kamailio (deploy/kamailio/kamailio.cfg) in front.

Everything is on loopback, but on two addresses: the caller (sipp) is 127.0.0.1 and Kamailio listens on
127.0.0.2, so a node that trusts only 127.0.0.2 really tells the proxy from the caller."""

from __future__ import annotations

import contextlib
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx

from bench.common.cluster import LOCAL_IP, PROXY_IP, Kamailio, ServeProcess, node_settings
from tests.conftest import free_port
from tests.sip_calls.conftest import CALLER_PHRASES

CALLER_IP = LOCAL_IP
__all__ = ["PROXY_IP", "Node", "Proxy", "cluster", "scenario"]
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
# The offline engines that start fastest, one worker each, for tests about the topology, not the speech.
LIGHT_ENGINES = ('[llm]\nprovider = "local"\n' + SPEECH["pocketsphinx"]
                 + '[espeak]\nworkers = 1\n[memory]\nembedding = "none"\n')


@dataclass
class Node(ServeProcess):
    """A cluster node as bench/common/cluster.py starts one, with the offline engines the tests can hear."""

    speech: str = "pocketsphinx"  # a key of SPEECH
    drain_timeout_s: float = 30.0
    rtp_ports: tuple[int, int] = (0, 0)  # the node's RTP range, chosen at start
    extra: str = ""  # TOML appended to the node's config (its own sections, e.g. [admission])

    def write_config(self, db_uri: str) -> Path:
        """The test's own settings; the cluster's (ports, database, trust) come as variables over them."""
        phrases = ", ".join(f'"{p}"' for p in [*CALLER_PHRASES, *MEMORY_PHRASES])
        config = self.directory / "config.toml"
        config.write_text(f"""
[server]
drain_timeout_s = {self.drain_timeout_s}
[sip]
invite_rate_per_min = 0
# The memory test hears replies on a port of its own, not where sipp streams from.
symmetric_rtp = false
[webrtc]
enabled = false
[pipeline]
greeting = ""
vad = "energy"
end_of_turn = "off"
vad_offset_ms = 500
# Callers here keep a line open in silence for up to 30 s (the erasure test's wait between two questions):
# the idle caller's prompt and hang-up (pipeline.idle_prompt_s) would end those calls; its own tests
# are tests/sip_calls/test_idle_callers.py and tests/webrtc/test_idle_caller.py.
idle_prompt_s = 0
[llm]
provider = "local"
{SPEECH[self.speech]}[pocketsphinx]
workers = 1
phrases = [{phrases}]
[espeak]
workers = 1
[memory]
embedding = "none"
{self.extra}""")
        return config

    def start(self, db_uri: str) -> None:  # type: ignore[override]
        # Below the kernel's ephemeral ports (32768-60999), where free_port() finds the node's own SIP
        # and HTTP ports: a SIP socket inside the RTP range would count as a leaked RTP socket.
        rtp_low = random.randrange(10000, 32000) & ~1
        self.rtp_ports = (rtp_low, rtp_low + 399)
        settings = node_settings(self, db_uri, OWNER_KEY_SECRET, self.rtp_ports)
        super().start(self.write_config(db_uri), settings)

    def sip_calls_ended(self) -> int:
        """Calls this node has seen end (any outcome), from its own /metrics."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        pattern = r'^voicegate_calls_total\{[^}]*transport="sip"[^}]*\} ([0-9.]+)$'
        return int(sum(float(v) for v in re.findall(pattern, text, re.MULTILINE)))


class Proxy(Kamailio):
    """Kamailio (deploy/kamailio/kamailio.cfg) over `nodes`, probing them every PROBE_INTERVAL_S."""

    def __init__(self, directory: Path, port: int, nodes: list[Node], trunk_nets: str = f"{CALLER_IP}/32",
                 pike_density: int = 2000) -> None:  # far above what the load tests send from one source
        super().__init__(directory, port, [node.sip_uri for node in nodes], trunk_nets, PROBE_INTERVAL_S,
                         pike_density)
        self.nodes = nodes


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
            drain_timeout_s: float = 30.0, extra: Sequence[str] = ()) -> Iterator[tuple[Proxy, list[Node]]]:
    """`extra`: TOML for each node's config in turn (node a's first)."""
    nodes = []
    for index in range(count):
        node_dir = directory / f"node-{'ab'[index]}"
        node_dir.mkdir()
        nodes.append(Node("ab"[index], node_dir, free_port(), free_port(), speech=speech,
                          drain_timeout_s=drain_timeout_s, extra=extra[index] if index < len(extra) else ""))
    proxy_dir = directory / "proxy"
    proxy_dir.mkdir()
    proxy = Proxy(proxy_dir, free_port(), nodes, trunk_nets, pike_density)
    with running(nodes, db_uri, proxy):
        yield proxy, nodes


class FrontEnd(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


@contextlib.contextmanager
def running(nodes: Sequence[Node], db_uri: str, front: FrontEnd) -> Iterator[None]:
    """Start `nodes` (all at once), wait until each is healthy, then `front`; stop all of them at the end."""
    try:
        for node in nodes:
            node.start(db_uri)
        for node in nodes:
            node.wait_healthy()
        front.start()
        yield
    finally:
        front.stop()
        for node in nodes:
            node.stop()
