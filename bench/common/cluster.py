"""voicegate as it is deployed, one process class each: a `voicegate serve` node, Kamailio in front of the
nodes' SIP side, HAProxy in front of their HTTP side (deploy/kamailio, deploy/haproxy), all on loopback.

`make cluster` (scripts/cluster.py) starts them, the capacity and SIP benchmarks measure them, and
tests/cluster/ drives them: what the tests prove is what the others start.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent.parent
KAMAILIO = "/usr/sbin/kamailio"
HAPROXY = "/usr/sbin/haproxy"
KAMAILIO_CFG = REPO / "deploy" / "kamailio" / "kamailio.cfg"
HAPROXY_CFG = REPO / "deploy" / "haproxy" / "haproxy.cfg"
# Kamailio has an address of its own, so a node that trusts only it tells the proxy from a caller on
# the same machine (callers and HAProxy use 127.0.0.1).
PROXY_IP = "127.0.0.2"
LOCAL_IP = "127.0.0.1"
NODE_NAMES = ("a", "b")


def wait_until(check: Callable[[], bool], what: str, timeout: float,
               proc: subprocess.Popen[bytes] | None = None, log: Path | None = None) -> None:
    """Poll `check` until it holds; fail naming `what` (with the log's tail) on timeout or if `proc` exits."""
    deadline = time.monotonic() + timeout
    while not check():
        exited = proc is not None and proc.poll() is not None
        if exited or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"{what}: {'exited' if exited else 'timed out'}\n{tail}")
        time.sleep(0.3)


def stop_process(proc: subprocess.Popen[bytes] | None, timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(15)


@dataclass
class ServeProcess:
    """One `voicegate serve` node. `start` takes its settings as VOICEGATE_* variables over `config`."""

    name: str
    directory: Path
    http_port: int
    sip_port: int
    proc: subprocess.Popen[bytes] | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.directory / "serve.log"

    @property
    def url(self) -> str:
        return f"http://{LOCAL_IP}:{self.http_port}"

    @property
    def http_address(self) -> str:
        return f"{LOCAL_IP}:{self.http_port}"

    @property
    def sip_uri(self) -> str:
        return f"sip:{LOCAL_IP}:{self.sip_port}"

    def start(self, config: Path | None, settings: Mapping[str, str] = {}) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VOICEGATE_")}
        env.update(settings)
        args = [sys.executable, "-m", "voicegate", *(["--config", str(config)] if config else []), "serve"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)

    def healthy(self) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{self.url}/health", timeout=3).status_code == 200
        return False

    def wait_healthy(self, timeout: float = 180) -> None:
        wait_until(self.healthy, f"node {self.name} becoming healthy", timeout, self.proc, self.log)

    def kill(self) -> None:
        """kill -9: the node stops answering anything, as a crashed or unplugged machine would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, timeout: float = 30) -> None:
        stop_process(self.proc, timeout)


def node_settings(node: ServeProcess, db_uri: str, owner_key_secret: str, rtp_ports: tuple[int, int],
                  trusted_sip: str = f"{PROXY_IP}/32", trusted_http: str = f"{LOCAL_IP}/32") -> dict[str, str]:
    """What makes a node a member of the cluster, as the environment it is started with."""
    return {
        "VOICEGATE_SERVER__HOST": LOCAL_IP,
        "VOICEGATE_SERVER__PORT": str(node.http_port),
        "VOICEGATE_SERVER__DATA_DIR": str(node.directory / "data"),
        "VOICEGATE_SERVER__NODE_ID": f"node-{node.name}",
        "VOICEGATE_SERVER__TRUSTED_PROXIES": json.dumps([trusted_http]),
        "VOICEGATE_SIP__ENABLED": "true",
        "VOICEGATE_SIP__BIND": f"{LOCAL_IP}:{node.sip_port}",
        "VOICEGATE_SIP__TRANSPORTS": '["udp"]',
        "VOICEGATE_SIP__TRUSTED_PEERS": json.dumps([trusted_sip]),
        "VOICEGATE_SIP__RTP_PORT_MIN": str(rtp_ports[0]),
        "VOICEGATE_SIP__RTP_PORT_MAX": str(rtp_ports[1]),
        "VOICEGATE_MEMORY__ENABLED": "true",
        "VOICEGATE_MEMORY__PROVIDER": "pgvector",
        "VOICEGATE_MEMORY__OWNER_KEY_SECRET": owner_key_secret,
        "VOICEGATE_PGVECTOR__CONNECTION_STRING": db_uri,
    }


@dataclass
class Kamailio:
    """Kamailio with deploy/kamailio/kamailio.cfg, dispatching over `targets` (sip: URIs)."""

    directory: Path
    port: int
    targets: list[str]
    trunk_nets: str = f"{LOCAL_IP}/32"
    probe_interval_s: int = 2
    pike_density: int = 2000
    proc: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        return f"{PROXY_IP}:{self.port}"

    @property
    def log(self) -> Path:
        return self.directory / "kamailio.log"

    def start(self) -> None:
        listing = self.directory / "dispatcher.list"
        listing.write_text("".join(f"1 {uri}\n" for uri in self.targets))
        rundir = self.directory / "run"
        rundir.mkdir(parents=True, exist_ok=True)
        args = [
            KAMAILIO, "-f", str(KAMAILIO_CFG), "-DD", "-E", "-Y", str(rundir), "-P", str(rundir / "kamailio.pid"),
            "-A", f"LISTEN=udp:{self.target}", "-A", f'DISPATCHER_LIST="{listing}"',
            "-A", f'TRUNK_NETS="{self.trunk_nets}"', "-A", f"PROBE_INTERVAL={self.probe_interval_s}",
            "-A", f"PIKE_DENSITY={self.pike_density}",
        ]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(args, cwd=self.directory, stdout=out, stderr=subprocess.STDOUT)
        wait_until(self.answers, "kamailio answering", 30, self.proc, self.log)

    def answers(self) -> bool:
        """Whether Kamailio replies to a request (it refuses a MESSAGE, which is all we need to know)."""
        return bool(self.send_messages(1, wait=1.0))

    def send_messages(self, count: int, wait: float = 3.0) -> list[str]:
        """Send `count` MESSAGE requests from 127.0.0.1 at once; the status lines that came back."""
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.bind((LOCAL_IP, 0))
            port = sock.getsockname()[1]
            for _ in range(count):
                tag = secrets.token_hex(6)
                sock.sendto((f"MESSAGE sip:probe@{self.target} SIP/2.0\r\n"
                             f"Via: SIP/2.0/UDP {LOCAL_IP}:{port};branch=z9hG4bK-{tag}\r\n"
                             f"From: <sip:probe@{LOCAL_IP}>;tag=1\r\nTo: <sip:probe@{self.target}>\r\n"
                             f"Call-ID: probe-{tag}\r\nCSeq: 1 MESSAGE\r\n"
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
        stop_process(self.proc, 15)


@dataclass
class Haproxy:
    """HAProxy with deploy/haproxy/haproxy.cfg in front of two nodes' HTTP addresses (host:port)."""

    directory: Path
    port: int
    backends: list[str]
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{LOCAL_IP}:{self.port}"

    @property
    def log(self) -> Path:
        return self.directory / "haproxy.log"

    def start(self) -> None:
        if len(self.backends) != len(NODE_NAMES):
            raise ValueError(f"deploy/haproxy/haproxy.cfg names {len(NODE_NAMES)} servers")
        env = dict(os.environ, VG_HTTP_BIND=f"{LOCAL_IP}:{self.port}")
        names = (f"VG_NODE_{name.upper()}" for name in NODE_NAMES)
        env.update(zip(names, self.backends, strict=True))
        with self.log.open("ab") as out:
            # -db: stay in the foreground; -W: master-worker, so SIGTERM stops the worker too.
            self.proc = subprocess.Popen([HAPROXY, "-db", "-W", "-f", str(HAPROXY_CFG)], cwd=self.directory,
                                         env=env, stdout=out, stderr=subprocess.STDOUT)
        wait_until(self.routes, "haproxy routing to a healthy node", 60, self.proc, self.log)

    def routes(self) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{self.url}/health", timeout=3).status_code == 200
        return False

    def stop(self) -> None:
        stop_process(self.proc, 15)


def free_port(kind: int = socket.SOCK_STREAM, host: str = LOCAL_IP) -> int:
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def embedded_postgres(directory: Path) -> Iterator[str]:
    from voicegate.internal.db.embedded import EmbeddedPostgres

    database = EmbeddedPostgres(directory)
    try:
        yield database.start_sync()
    finally:
        database.stop_sync()
