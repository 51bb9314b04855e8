"""`make cluster`: voicegate as it is deployed, on one machine.

One PostgreSQL (the embedded pgserver, or `--database URI`), two `voicegate serve` nodes, Kamailio in
front of their SIP side (deploy/kamailio/kamailio.cfg) and HAProxy in front of their HTTP side
(deploy/haproxy/haproxy.cfg), all on loopback. It prints the addresses; Ctrl-C stops everything.

    python -m scripts.cluster [--config FILE] [--dir .cluster] [--http-port 8080] [--sip-port 5060]

Each node reads `--config` (or the embedded defaults) and then the cluster's own settings as
VOICEGATE_* variables, which win: its ports, data directory, node id, the shared database and secret,
memory on, and trust in Kamailio's address (SIP) and HAProxy's (X-Forwarded-For). The process classes
(bench/common/cluster.py) are the ones tests/cluster/ drives, so what the tests prove is what this starts.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.common.cluster import (
    HAPROXY,
    KAMAILIO,
    LOCAL_IP,
    NODE_NAMES,
    PROXY_IP,
    REPO,
    Haproxy,
    Kamailio,
    ServeProcess,
    embedded_postgres,
    node_settings,
)


def persistent_secret(path: Path) -> str:
    """The cluster's owner_key_secret: made once, kept (mode 600), so memory survives a restart."""
    if not path.exists():
        path.write_text(secrets.token_urlsafe(32))
        path.chmod(0o600)
    return path.read_text().strip()


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
