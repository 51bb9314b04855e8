"""`make cluster`: voicegate as it is deployed, on one machine.

One PostgreSQL (the embedded pgserver, or `--database URI`), two `voicegate serve` nodes, Kamailio in
front of their SIP side (deploy/kamailio/kamailio.cfg) and HAProxy in front of their HTTP side
(deploy/haproxy/haproxy.cfg), all on loopback. It prints the addresses; Ctrl-C stops everything.

    python -m scripts.cluster [--config FILE] [--dir .cluster] [--http-port 8080] [--sip-port 5060]

Each node reads `--config` (or the embedded defaults) and then the cluster's own settings as
VOICEGATE_* variables, which win: its ports, data directory, node id, the shared database and secret,
memory on, and trust in Kamailio's address (SIP) and HAProxy's (X-Forwarded-For). The process classes
are the ones tests/cluster/ drives, so what the tests prove is what this starts.
"""

from __future__ import annotations

import argparse
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

REPO = Path(__file__).resolve().parent.parent
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


def persistent_secret(path: Path) -> str:
    """The cluster's owner_key_secret: made once, kept (mode 600), so memory survives a restart."""
    if not path.exists():
        path.write_text(secrets.token_urlsafe(32))
        path.chmod(0o600)
    return path.read_text().strip()


@contextlib.contextmanager
def embedded_postgres(directory: Path) -> Iterator[str]:
    from voicegate.internal.db.embedded import EmbeddedPostgres

    database = EmbeddedPostgres(directory)
    try:
        yield database.start_sync()
    finally:
        database.stop_sync()


def say(text: str) -> None:
    print(f"cluster: {text}", flush=True)


def run(args: argparse.Namespace) -> int:
    base = Path(args.dir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    config = Path(args.config).resolve() if args.config else None
    if config is not None and not config.is_file():
        print(f"cluster: --config {config}: no such file", file=sys.stderr)
        return 2
    for program in (KAMAILIO, HAPROXY):
        if not Path(program).exists():
            print(f"cluster: {program} is missing (make cluster installs kamailio and haproxy)", file=sys.stderr)
            return 2
    with contextlib.ExitStack() as stack:
        say(f"PostgreSQL ({'yours' if args.database else 'embedded, in ' + str(base / 'postgres')}) ...")
        db_uri = args.database or stack.enter_context(embedded_postgres(base))
        secret = persistent_secret(base / "owner_key_secret")
        nodes: list[ServeProcess] = []
        for index, name in enumerate(NODE_NAMES):
            node_dir = base / f"node-{name}"
            node_dir.mkdir(exist_ok=True)
            node = ServeProcess(name, node_dir, args.node_http_port + index, args.node_sip_port + index)
            rtp = (20000 + 5000 * index, 24999 + 5000 * index)
            node.start(config, node_settings(node, db_uri, secret, rtp))
            stack.callback(node.stop)
            nodes.append(node)
        for node in nodes:
            say(f"node {node.name} (HTTP {node.url}, SIP {node.sip_uri}) starting; log {node.log}")
            node.wait_healthy()
            say(f"node {node.name} healthy")
        proxy_dir = base / "kamailio"
        proxy_dir.mkdir(exist_ok=True)
        kamailio = Kamailio(proxy_dir, args.sip_port, [node.sip_uri for node in nodes],
                            trunk_nets=args.trunk_nets, probe_interval_s=args.probe_interval)
        stack.callback(kamailio.stop)
        kamailio.start()
        say(f"Kamailio answering on udp {kamailio.target}")
        balancer_dir = base / "haproxy"
        balancer_dir.mkdir(exist_ok=True)
        haproxy = Haproxy(balancer_dir, args.http_port, [node.http_address for node in nodes])
        stack.callback(haproxy.stop)
        haproxy.start()
        print(f"\nvoicegate cluster is up (Ctrl-C stops everything)\n"
              f"  browser page   {haproxy.url}/   (HAProxy, sticky per WHIP session)\n"
              f"  SIP            sip:voicegate@{kamailio.target}   (Kamailio, UDP; callers from "
              f"{args.trunk_nets} are a trunk)\n"
              + "".join(f"  node {n.name}         {n.url}   {n.sip_uri}   log {n.log}\n" for n in nodes)
              + f"  logs           {kamailio.log}, {haproxy.log}\n", flush=True)
        code = watch([*((f"node {n.name}", n.proc) for n in nodes), ("kamailio", kamailio.proc),
                      ("haproxy", haproxy.proc)])
    return code  # after the stack has stopped everything, in the reverse order of starting


def watch(processes: list[tuple[str, subprocess.Popen[bytes] | None]]) -> int:
    """Wait for Ctrl-C or SIGTERM (0), or for one of `processes` to exit by itself (1)."""
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    while not stopping:
        for name, proc in processes:
            if proc is not None and proc.poll() is not None:
                say(f"{name} exited with {proc.returncode}; stopping the cluster")
                return 1
        time.sleep(0.5)
    say("stopping HAProxy, Kamailio, the nodes and PostgreSQL")
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="make cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=os.environ.get("CONFIG", ""), help="each node's config file")
    parser.add_argument("--dir", default=str(REPO / "data" / "cluster"), help="data, logs, secret")
    parser.add_argument("--database", default="", help="a PostgreSQL URI instead of the embedded one")
    parser.add_argument("--http-port", type=int, default=8080, help="HAProxy's port")
    parser.add_argument("--sip-port", type=int, default=5060, help=f"Kamailio's port (on {PROXY_IP})")
    parser.add_argument("--node-http-port", type=int, default=8081, help="node a's; node b's is one more")
    parser.add_argument("--node-sip-port", type=int, default=5071, help="node a's; node b's is one more")
    parser.add_argument("--trunk-nets", default=f"{LOCAL_IP}/32", help="sources Kamailio believes")
    parser.add_argument("--probe-interval", type=int, default=2, help="seconds between OPTIONS probes")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(run(parse()))
