"""Benchmark: what Kamailio in front costs, calls per core through it to two nodes against one node direct.

The cluster is the deployed one (bench/common/cluster.py's process classes, which `make cluster` starts):
one embedded PostgreSQL, two `voicegate serve` processes with memory on (pgvector, shared owner-key secret)
and Kamailio with deploy/kamailio/kamailio.cfg dispatching over them, all on loopback. The call shape is
bench/sip/calls.py's: sipp places N calls (ramping at --rate calls/s), each streaming looping speech as
PCMU, holds them all for the measured window and hangs up; the node answers with its own 20 ms stream;
recognition is deaf (bench/sip/deaf_node.py) and nobody is greeted, so a call is SIP + G.711 both ways + VAD.

Two phases on the same processes, after a short idle reading:
  direct    sipp -> node a                      (one node, no front end)
  proxied   sipp -> Kamailio -> nodes a and b   (signalling only through Kamailio; RTP goes straight
                                                 to the node that answered, as deployed without rtpengine)
Memory is on, as the cluster is deployed (it is why the nodes share PostgreSQL): a deaf caller gives it
nothing to store, its reads at call start cost the same in both phases, and PostgreSQL's CPU is
reported on its own, so it does not move the front end's figure.
Each process's CPU is read from /proc (itself and its descendants): the nodes, Kamailio (its main
process and children), PostgreSQL, sipp, and what the rest of the machine did ("others").

    .venv/bin/python -m bench.sip.cluster_calls --calls 100 --seconds 20

"calls per core" is the N held divided by the cores the counted processes kept busy during the hold
window (CPU seconds / wall seconds): the concurrent calls one fully used core would carry at this cost,
100 / bench/sip/calls.py's "CPU %/call". Kamailio only sees signalling, so its cost is per call set up and
torn down, read over the whole phase: ms of CPU per completed call.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx

from bench.common.cluster import (
    KAMAILIO,
    LOCAL_IP,
    PROXY_IP,
    REPO,
    Kamailio,
    ServeProcess,
    embedded_postgres,
    free_port,
    node_settings,
)
from bench.common.figures import (
    machine_busy_seconds,
    pipeline_settings,
    process_tree_cpu_seconds,
    progress,
    raise_fd_limit,
    save,
    table,
)
from bench.sip.calls import SCENARIO, caller_audio

OWNER_KEY_SECRET = "bench-cluster-owner-key-secret-0123456789"
# bench/sip/calls.py's call, with the route set Kamailio's Record-Route gives (empty when direct, and
# sipp drops the empty line) on the in-dialog requests, so ACK and BYE pass the proxy.
CALL = SCENARIO.replace("[peer_tag_param]\n", "[peer_tag_param]\n      [routes]\n")
# The measured pipeline unless --set says otherwise: the cluster tests' cheap one, so two nodes, Kamailio
# and sipp fit on two shared cores and the front end's share is not lost in the VAD's.
DEFAULT_PIPELINE = ["pipeline.vad=energy", "pipeline.end_of_turn=off"]
# The processes each phase's figures count: one node alone, or the front end and both nodes behind it.
COUNTED = {"direct": ["node a"], "proxied": ["node a", "node b", "kamailio"]}


class BenchNode(ServeProcess):
    """A cluster node as bench/common/cluster.py starts one, through bench/sip/deaf_node.py (recognition deaf)."""

    def start(self, config: Path | None, settings: Mapping[str, str] = {}) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VOICEGATE_")}
        env.update(settings)
        args = [sys.executable, "-m", "bench.sip.deaf_node", *(["--config", str(config)] if config else []), "serve"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=out,
                                         stderr=subprocess.STDOUT)

    def metric(self, name: str) -> float:
        """The sum of a metric's SIP series on this node's /metrics."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        pattern = rf'^{name}\{{[^}}]*transport="sip"[^}}]*\}} ([0-9.e+]+)$'
        return sum(float(v) for v in re.findall(pattern, text, re.MULTILINE))

    def live_calls(self) -> int:
        return int(self.metric("voicegate_live_sessions"))


def node_config(directory: Path, pipeline: dict[str, Any]) -> Path:
    """What bench/sip/calls.py sets on its server, as the file a node reads (the cluster's own keys
    come as VOICEGATE_* variables over it)."""
    lines = "".join(f"{key} = {json.dumps(value)}\n" for key, value in pipeline.items())
    path = directory / "node.toml"
    path.write_text(f"""
[sip]
invite_rate_per_min = 0
rtp_timeout_s = 60.0
[webrtc]
enabled = false
[pipeline]
greeting = ""
{lines}[llm]
provider = "local"
[stt]
provider = "pocketsphinx"
[tts]
provider = "espeak"
[espeak]
workers = 1
[memory]
embedding = "none"
""")
    return path


@dataclass
class Meters:
    """CPU seconds so far of every part of the cluster, each read from /proc."""

    pids: dict[str, int]

    def read(self, sipp: subprocess.Popen[bytes] | None = None) -> dict[str, float]:
        reading = {name: process_tree_cpu_seconds(pid) for name, pid in self.pids.items()}
        # sipp is our child: alive, /proc has it; once waited for, its time is in our children's rusage.
        ended = resource.getrusage(resource.RUSAGE_CHILDREN)
        reading["sipp"] = ended.ru_utime + ended.ru_stime + (
            process_tree_cpu_seconds(sipp.pid) if sipp is not None and sipp.poll() is None else 0.0)
        reading["bench"] = time.process_time()
        reading["machine"] = machine_busy_seconds()
        reading["wall"] = time.monotonic()
        return reading


def spent(start: dict[str, float], end: dict[str, float]) -> dict[str, float]:
    """CPU seconds per part over a window, "others" being what nobody we started used, and its wall time."""
    out = {name: end[name] - start[name] for name in start}
    ours = sum(v for k, v in out.items() if k not in ("machine", "wall"))
    # Clamped: the meters tick at 10 ms each, so on a quiet machine the difference can dip below zero.
    out["others"] = max(out["machine"] - ours, 0.0)
    return out


def udp_port(host: str = LOCAL_IP) -> int:
    return free_port(socket.SOCK_DGRAM, host)


def postmaster_pid(base: Path) -> int:
    """The embedded PostgreSQL's postmaster, from the first line of its pid file."""
    return int((base / "postgres" / "postmaster.pid").read_text().split()[0])


def sipp_counts(directory: Path) -> tuple[int, int]:
    """(successful, failed) calls by sipp's own account: the last line of its -trace_stat file."""
    files = sorted(directory.glob("*_.csv"))
    if not files:
        return 0, 0
    rows = files[0].read_text().splitlines()
    header, last = rows[0].split(";"), rows[-1].split(";")
    return int(last[header.index("SuccessfulCall(C)")]), int(last[header.index("FailedCall(C)")])


def wait_for(check: Callable[[], int], goal: int, timeout: float, label: str, total: int) -> bool:
    """Poll `check` (live calls) until it is `goal`, showing how far it has come from the other end."""
    deadline = time.monotonic() + timeout
    while (value := check()) != goal:
        if time.monotonic() > deadline:
            return False
        progress(label, min(value if goal else total - value, total), total)
        time.sleep(1.0)
    progress(label, total, total)
    return True


def run_phase(name: str, target: str, carriers: list[BenchNode], meters: Meters, args: argparse.Namespace,
              work: Path, audio: Path) -> dict[str, Any]:
    """N calls at `target`, carried by `carriers`: CPU over the hold window and over the whole phase."""
    calls, ramp = args.calls, args.calls / args.rate
    hold_ms = int((ramp + args.warmup + args.seconds + 8) * 1000)
    phase_dir = work / name
    phase_dir.mkdir()
    script = phase_dir / "call.xml"
    script.write_text(CALL.replace("AUDIO_FILE", str(audio)).replace("HOLD_MS", str(hold_ms)))
    command = ["sipp", target, "-sf", str(script), "-i", LOCAL_IP, "-mi", LOCAL_IP, "-p", str(udp_port()),
               "-mp", str(udp_port()), "-m", str(calls), "-l", str(calls), "-r", str(args.rate), "-nostdin",
               "-max_socket", str(4 * calls + 100), "-timeout", f"{int(hold_ms / 1000 + ramp + 60)}s",
               "-trace_stat", "-fd", "1", "-trace_err"]
    lost_before = sum(node.metric("voicegate_rtp_packets_lost_total") for node in carriers)
    live = lambda: sum(node.live_calls() for node in carriers)  # noqa: E731
    begin = meters.read()
    sipp = subprocess.Popen(command, cwd=phase_dir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=raise_fd_limit)
    try:
        all_up = wait_for(live, calls, ramp + 60, f"{name}: {calls} calls up", calls)
        time.sleep(args.warmup)
        hold_start = meters.read(sipp)
        time.sleep(args.seconds)
        hold_end = meters.read(sipp)
        per_node = [node.live_calls() for node in carriers]
        _, stderr = sipp.communicate(timeout=hold_ms / 1000 + ramp + 120)
    finally:  # a node that stopped answering must not leave sipp calling it after we are gone
        if sipp.poll() is None:
            sipp.kill()
            sipp.wait()
    all_ended = wait_for(live, 0, 60, f"{name}: {calls} calls down", calls)
    end = meters.read()
    ok, failed = sipp_counts(phase_dir)
    lost = sum(node.metric("voicegate_rtp_packets_lost_total") for node in carriers) - lost_before
    return {"phase": name, "calls": calls, "held": sum(per_node), "held_per_node": per_node, "all_up": all_up,
            "all_ended": all_ended, "completed": ok, "failed": failed, "sipp_rc": sipp.returncode,
            "sipp_errors": stderr.decode(errors="replace")[-500:] if sipp.returncode else "",
            "rtp_lost": int(lost), "hold": spent(hold_start, hold_end), "whole": spent(begin, end)}


def figures(row: dict[str, Any], counted: list[str]) -> dict[str, float]:
    """calls per core (hold window) and ms of CPU per completed call (whole phase) for `counted` parts."""
    hold, whole = row["hold"], row["whole"]
    cores = sum(hold[p] for p in counted) / hold["wall"]
    done = max(row["completed"], 1)
    return {"cores_busy": cores, "calls_per_core": row["held"] / cores if cores else float("nan"),
            "cpu_ms_per_call": 1000 * sum(whole[p] for p in counted) / done,
            "kamailio_ms_per_call": 1000 * whole["kamailio"] / done,
            "kamailio_hold_percent": 100 * hold["kamailio"] / hold["wall"]}


@contextlib.contextmanager
def deployed_cluster(base: Path, calls: int, pipeline: dict[str, Any]) -> Iterator[tuple[Kamailio, list[BenchNode],
                                                                                         Meters]]:
    """PostgreSQL, two nodes trusting both the caller's address and Kamailio's, Kamailio over them."""
    with contextlib.ExitStack() as stack:
        print("starting PostgreSQL (embedded) ...", flush=True)
        db_uri = stack.enter_context(embedded_postgres(base))
        config = node_config(base, pipeline)
        nodes: list[BenchNode] = []
        span = 4 * calls + 400  # as bench/sip/calls.py: room for every call's pair and for reuse delays
        for index, name in enumerate("ab"):
            directory = base / f"node-{name}"
            directory.mkdir()
            node = BenchNode(name, directory, free_port(), udp_port())
            low = 20000 + index * span
            settings = node_settings(node, db_uri, OWNER_KEY_SECRET, (low, low + span - 1))
            # Direct calls come from sipp's address, proxied ones from Kamailio's: the same node takes both.
            settings["VOICEGATE_SIP__TRUSTED_PEERS"] = json.dumps([f"{LOCAL_IP}/32", f"{PROXY_IP}/32"])
            node.start(config, settings)
            stack.callback(node.stop)
            nodes.append(node)
        for node in nodes:
            print(f"node {node.name} starting (log {node.log}) ...", flush=True)
            node.wait_healthy()
        proxy_dir = base / "kamailio"
        proxy_dir.mkdir()
        proxy = Kamailio(proxy_dir, udp_port(PROXY_IP), [node.sip_uri for node in nodes])
        stack.callback(proxy.stop)
        proxy.start()
        print(f"Kamailio answering on udp {proxy.target}", flush=True)
        pids = {f"node {n.name}": n.proc.pid for n in nodes if n.proc is not None}
        assert proxy.proc is not None
        pids["kamailio"], pids["postgres"] = proxy.proc.pid, postmaster_pid(base)
        yield proxy, nodes, Meters(pids)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="voicegate-bench-cluster-"))
    try:
        audio = caller_audio(work)
        with deployed_cluster(work, args.calls, args.pipeline) as (proxy, nodes, meters):
            idle_start = meters.read()
            time.sleep(args.idle)
            idle = spent(idle_start, meters.read())
            print(f"idle {args.idle:g} s: " + ", ".join(f"{k} {100 * v / idle['wall']:.1f}%" for k, v in idle.items()
                                                          if k != "wall"), flush=True)
            phases = {"direct": lambda: run_phase("direct", nodes[0].sip_uri.removeprefix("sip:"), nodes[:1],
                                                  meters, args, work, audio),
                      "proxied": lambda: run_phase("proxied", proxy.target, nodes, meters, args, work, audio)}
            # Whichever runs second finds node a warm (allocator, caches): --proxied-first shows how much.
            order = ["proxied", "direct"] if args.proxied_first else ["direct", "proxied"]
            rows = {}
            for name in order:
                rows[name] = phases[name]()
                report_phase(rows[name], COUNTED[name])
            direct, proxied = rows["direct"], rows["proxied"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    direct["figures"] = figures(direct, COUNTED["direct"])
    proxied["figures"] = figures(proxied, COUNTED["proxied"])
    proxied["figures_nodes_only"] = figures(proxied, ["node a", "node b"])
    # Kamailio probes the nodes in both phases; what the calls added is the difference.
    kamailio_net = proxied["figures"]["kamailio_ms_per_call"] - direct["figures"]["kamailio_ms_per_call"]
    return {"order": order, "idle": idle, "direct": direct, "proxied": proxied,
            "kamailio_net_ms_per_call": kamailio_net,
            "front_end_ms_per_call": proxied["figures"]["cpu_ms_per_call"] - direct["figures"]["cpu_ms_per_call"]}


def report_phase(row: dict[str, Any], counted: list[str]) -> None:
    f = figures(row, counted)
    print(f"[{row['phase']}] {row['held']}/{row['calls']} held {row['held_per_node']}, completed {row['completed']}, "
          f"failed {row['failed']}, RTP lost {row['rtp_lost']}; {f['calls_per_core']:.0f} calls per core "
          f"({f['cores_busy']:.2f} cores busy), {f['cpu_ms_per_call']:.1f} ms CPU per call, Kamailio "
          f"{f['kamailio_ms_per_call']:.2f} ms per call; others on the machine "
          f"{row['hold']['others'] / row['hold']['wall']:.2f} cores", flush=True)


def report(result: dict[str, Any]) -> None:
    parts = ["node a", "node b", "kamailio", "postgres", "sipp", "others", "machine"]
    header = ["phase", "window", "s", *(f"{p} %" for p in parts)]
    rows = [["idle", "idle", f"{result['idle']['wall']:.1f}",
             *(f"{100 * result['idle'][p] / result['idle']['wall']:.1f}" for p in parts)]]
    for name in ("direct", "proxied"):
        for window in ("hold", "whole"):
            w = result[name][window]
            rows.append([name, window, f"{w['wall']:.1f}", *(f"{100 * w[p] / w['wall']:.1f}" for p in parts)])
    print("\nCPU by part (% of one core):")
    print(table(rows, header))
    d, p, n = result["direct"], result["proxied"], result["proxied"]["figures_nodes_only"]
    header = ["", "calls", "held", "completed", "failed", "RTP lost", "calls/core", "CPU ms/call", "Kamailio ms/call"]
    rows = [["direct (node a)", d["calls"], d["held"], d["completed"], d["failed"], d["rtp_lost"],
             f"{d['figures']['calls_per_core']:.0f}", f"{d['figures']['cpu_ms_per_call']:.1f}", "-"],
            ["proxied (a + b + Kamailio)", p["calls"], p["held"], p["completed"], p["failed"], p["rtp_lost"],
             f"{p['figures']['calls_per_core']:.0f}", f"{p['figures']['cpu_ms_per_call']:.1f}",
             f"{p['figures']['kamailio_ms_per_call']:.2f}"],
            ["proxied, nodes only", "", "", "", "", "", f"{n['calls_per_core']:.0f}", f"{n['cpu_ms_per_call']:.1f}",
             ""]]
    print()
    print(table(rows, header))
    print(f"\nthe front end's cost: Kamailio {result['kamailio_net_ms_per_call']:.2f} ms CPU per call "
          "net of its probes "
          f"({p['figures']['kamailio_hold_percent']:.2f}% of a core while calls are only held); in total "
          f"{result['front_end_ms_per_call']:+.1f} ms CPU per call through Kamailio to two nodes against one "
          f"node direct")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=100, help="concurrent calls in each phase")
    parser.add_argument("--rate", type=int, default=20, help="new calls per second while ramping up")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds with every call held")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds between the last call up and measuring")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of the idle cluster measured first")
    parser.add_argument("--set", action="append", default=[], metavar="pipeline.KEY=VALUE",
                        help=f"a node pipeline setting (default: {' '.join(DEFAULT_PIPELINE)})")
    parser.add_argument("--proxied-first", action="store_true", help="run the proxied phase before the direct one")
    parser.add_argument("--label", default="cluster_calls", help="name of the results file")
    args = parser.parse_args()
    args.pipeline = pipeline_settings(args.set or DEFAULT_PIPELINE)
    for program in ("sipp", KAMAILIO):
        if shutil.which(program) is None:
            print(f"cluster_calls: {program} is not installed", file=sys.stderr)
            return 1
    if args.calls < 1 or args.rate < 1 or 20000 + 2 * (4 * args.calls + 400) > 32768:
        print("cluster_calls: --calls and --rate must be >= 1, and --calls at most 1400 (RTP port ranges "
              "below the ephemeral ones sipp's media ports come from)", file=sys.stderr)
        return 2
    if args.seconds <= 0 or args.warmup < 0 or args.idle < 0:
        print("cluster_calls: --seconds must be > 0, --warmup and --idle >= 0", file=sys.stderr)
        return 2
    raise_fd_limit()
    load_before = os.getloadavg()
    load = ", ".join(f"{x:.2f}" for x in load_before)
    print(f"cluster calls: {args.calls} calls per phase, {args.seconds:g} s held and measured, not pinned "
          f"(two nodes, Kamailio, PostgreSQL and sipp share {os.cpu_count()} CPUs); load average before: {load}",
          flush=True)
    result = measure(args)
    report(result)
    incomplete = [name for name in ("direct", "proxied")
                  if result[name]["completed"] != args.calls or result[name]["failed"] or not result[name]["all_up"]]
    if incomplete:
        print(f"cluster_calls: not every call completed in {', '.join(incomplete)} (see failed and sipp_errors "
              "in the JSON): those figures do not describe the calls asked for", file=sys.stderr)
    path = save(args.label, {"settings": {"calls": args.calls, "rate": args.rate, "seconds": args.seconds,
                                          "warmup": args.warmup, "idle": args.idle, "pipeline": args.pipeline,
                                          "proxied_first": args.proxied_first,
                                          "load_average_before": load_before,
                                          "load_average_after": os.getloadavg()}, **result})
    print(f"\nwrote {path}")
    return 1 if incomplete else 0


if __name__ == "__main__":
    sys.exit(main())
