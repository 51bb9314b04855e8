"""Control-plane throughput: PATCH /api/memory with expectedRevision, PostgreSQL 16 + pgvector (embedded).

    .venv/bin/python -m bench.memory.control_plane [--clients 20] [--seconds 20] [--in-process] [--profile]

M clients each loop for T seconds: GET /api/memory, then PATCH an append of one unique line with
`expectedRevision` set to the revision the GET returned. Two phases, each on fresh owners:
- own:    M owners, each writing only its own document (no contention; a 409 would be a bug);
- shared: M writers on ONE owner (all contention: most PATCHes meet a newer revision and get 409).
Reported: successful PATCHes per second, PATCH latency p50/p95/p99 (every PATCH, and the 200s apart),
the share of 409s, other statuses, and lost updates: the final document must hold exactly the lines of
the PATCHes that got 200, once each, and its revision must equal their number.

The server (uvicorn on a loopback port, the real app with memory = pgvector, embedding = wordllama,
`server.patch_rate_per_min = 0`, HS256 tokens from `mint_token`) runs in this process, pinned to CPU 0;
the httpx clients run in a child process (this file with --loadgen) and the embedded PostgreSQL's
processes are pinned to CPU 1: in one process the clients cost about as much CPU as the server does.
--in-process keeps the clients in the server's event loop and pins nothing. CPU of the server process,
PostgreSQL, the clients and CPU 0 in all (other work on the machine shows there) is reported.
Every write re-embeds and rewrites all lines of the document, so latency grows as the documents do:
the p50 of the first and last fifth of the successful PATCHes, and the line counts, are shown.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import logging
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common.figures import cpu_busy_seconds, percentiles, progress, save, table
from voicegate.internal.identity.jwt import mint_token

if TYPE_CHECKING:
    from voicegate.internal.config import Config

SERVER_CPU, CLIENT_CPU = 0, 1
SECRET = "bench-api-memory-0123456789abcdefghijklmnopqrstuv"
MAX_CHARS = 1_000_000  # the documents grow for the whole run; the default 2000 would refuse appends (422)


@dataclass
class Patch:
    at: float  # monotonic time the PATCH was sent
    ms: float
    status: int
    line: str
    owner: str


@dataclass
class Phase:
    patches: list[Patch] = field(default_factory=list)
    gets_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0  # how long the writers ran
    cpu_s: float = float("nan")  # CPU the load generator used meanwhile, when it ran as its own process


def pin(cpu: int) -> bool:
    """Every thread of this process (and those it starts later) on `cpu`, when there are two CPUs to share."""
    if (os.cpu_count() or 1) < 2:
        return False
    for thread in psutil.Process().threads():
        with contextlib.suppress(OSError):
            os.sched_setaffinity(thread.id, {cpu})
    return True


def headers(subject: str) -> dict[str, str]:
    token = mint_token(SECRET, subject, issuer="voicegate", audience="voicegate", ttl_s=3600)
    return {"Authorization": f"Bearer {token}"}


async def writer(http: httpx.AsyncClient, name: int, owner: str, deadline: float, phase: Phase) -> None:
    auth = headers(owner)
    n = 0
    while time.monotonic() < deadline:
        started = time.monotonic()
        got = await http.get("/api/memory", headers=auth)
        phase.gets_ms.append((time.monotonic() - started) * 1000)
        revision = got.json()["documents"]["memory"]["revision"]
        line = f"- writer {name} edit {n}"
        started = time.monotonic()
        response = await http.patch("/api/memory", headers=auth, json={
            "document": "memory", "action": "append", "content": line, "expectedRevision": revision})
        phase.patches.append(Patch(started, (time.monotonic() - started) * 1000, response.status_code, line, owner))
        n += 1


Starting = Callable[[], Awaitable[None]]  # called as the writers are about to start


async def drive(url: str, owners: list[str], seconds: float, label: str, starting: Starting) -> Phase:
    """The M writers, one per entry of `owners`, for `seconds`; what each request got and took."""
    phase = Phase()
    limits = httpx.Limits(max_connections=len(owners) * 2, max_keepalive_connections=len(owners) * 2)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        await starting()
        started = time.monotonic()
        deadline = started + seconds
        tasks = [asyncio.create_task(writer(http, n, owner, deadline, phase)) for n, owner in enumerate(owners)]
        shown = 0
        while not all(t.done() for t in tasks):
            await asyncio.sleep(1.0)
            elapsed = int(min(seconds, time.monotonic() - started))
            if elapsed > shown:
                shown = elapsed
                progress(f"{label}: {len(phase.patches)} PATCHes", elapsed, int(seconds))
        await asyncio.gather(*tasks)
        phase.seconds = time.monotonic() - started
    return phase


def loadgen(url: str, seconds: float, label: str, out: str, owners: list[str]) -> None:
    """The load generator as its own process (--loadgen): says "ready", starts on "go" (so the parent
    measures CPU over the writers' run, not this process's start), writes what it saw to `out`."""
    me = psutil.Process()
    before = me.cpu_times()

    async def go() -> None:
        nonlocal before
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        before = me.cpu_times()

    phase = asyncio.run(drive(url, owners, seconds, label, go))
    after = me.cpu_times()
    phase.cpu_s = after.user + after.system - before.user - before.system
    Path(out).write_text(json.dumps({"patches": [list(vars(p).values()) for p in phase.patches],
                                     "gets_ms": phase.gets_ms, "seconds": phase.seconds, "cpu_s": phase.cpu_s}))


async def drive_elsewhere(url: str, owners: list[str], seconds: float, label: str, starting: Starting) -> Phase:
    """`drive` in a child process (pinned to CLIENT_CPU)."""
    with tempfile.TemporaryDirectory(prefix="voicegate-api-loadgen-") as directory:
        out = Path(directory) / "phase.json"
        child = await asyncio.create_subprocess_exec(sys.executable, __file__, "--loadgen", url, str(seconds), label,
                                                     str(out), ",".join(owners), stdin=asyncio.subprocess.PIPE,
                                                     stdout=asyncio.subprocess.PIPE)
        assert child.stdin is not None and child.stdout is not None
        if (await child.stdout.readline()).strip() == b"ready":
            await starting()
            child.stdin.write(b"go\n")
            await child.stdin.drain()
        if await child.wait() != 0:
            raise RuntimeError(f"the load generator failed (exit {child.returncode})")
        data = json.loads(out.read_text())
    return Phase([Patch(*values) for values in data["patches"]], data["gets_ms"], data["seconds"], data["cpu_s"])


async def final_documents(http: httpx.AsyncClient, owners: set[str]) -> dict[str, dict[str, Any]]:
    return {owner: (await http.get("/api/memory", headers=headers(owner))).json()["documents"]["memory"]
            for owner in owners}


def lost_updates(phase: Phase, finals: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Lines of 200-PATCHes missing from (or doubled in) the final documents, and revision mismatches."""
    missing = doubled = extra = bad_revision = 0
    for owner, document in finals.items():
        won = [p.line for p in phase.patches if p.owner == owner and p.status == 200]
        lines = [line for line in document["content"].splitlines() if line.strip()]
        counts = {line: lines.count(line) for line in set(lines)}
        missing += sum(1 for line in won if counts.get(line, 0) == 0)
        doubled += sum(1 for line in won if counts.get(line, 0) > 1)
        extra += len(set(lines) - set(won))
        bad_revision += int(document["revision"] != len(won))
    return {"missing": missing, "doubled": doubled, "unexpected_lines": extra, "owners_with_wrong_revision":
            bad_revision}




class CpuMeter:
    """CPU seconds of this process, of our PostgreSQL (postmaster and backends) and of CPU 0 in all."""

    def __init__(self, pgdata: Path) -> None:
        self.me = psutil.Process()
        self.pgdata = str(pgdata)

    def postgres(self) -> list[psutil.Process]:
        for process in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error, TypeError):
                if any(self.pgdata in part for part in process.info["cmdline"] or []):
                    return [process, *process.children(recursive=True)]
        return []

    def pin_postgres(self, cpu: int) -> None:
        """PostgreSQL beside the clients, off the server's CPU (backends forked later inherit it)."""
        for process in self.postgres():
            with contextlib.suppress(psutil.Error):
                process.cpu_affinity([cpu])

    def sample(self) -> tuple[float, dict[int, float], float]:
        mine = self.me.cpu_times()
        pg: dict[int, float] = {}
        for process in self.postgres():
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                pg[process.pid] = times.user + times.system
        return mine.user + mine.system, pg, cpu_busy_seconds(SERVER_CPU)


async def run_phase(http: httpx.AsyncClient, label: str, owners: list[str], args: argparse.Namespace,
                    meter: CpuMeter, profiler: cProfile.Profile | None) -> dict[str, Any]:
    load_before = list(os.getloadavg())
    if not args.in_process and pin(SERVER_CPU):
        meter.pin_postgres(CLIENT_CPU)
    before: dict[str, Any] = {}

    async def starting() -> None:
        before["sample"], before["at"] = meter.sample(), time.monotonic()
        if profiler is not None:
            profiler.enable()

    drive_with = drive if args.in_process else drive_elsewhere
    phase = await drive_with(str(http.base_url), owners, args.seconds, label, starting)
    if profiler is not None:
        profiler.disable()
    (cpu0, pg0, busy0), (cpu1, pg1, busy1) = before["sample"], meter.sample()
    wall = time.monotonic() - before["at"]
    finals = await final_documents(http, set(owners))
    ok = [p for p in phase.patches if p.status == 200]
    conflicts = [p for p in phase.patches if p.status == 409]
    others = sorted({p.status for p in phase.patches} - {200, 409})
    fifth = max(1, len(ok) // 5)
    lines = [len(d["content"].splitlines()) for d in finals.values()]
    return {
        "clients": len(owners), "owners": len(set(owners)), "seconds": round(phase.seconds, 2),
        "patches": len(phase.patches), "patch_ok": len(ok), "patch_409": len(conflicts),
        "patch_other": len(phase.patches) - len(ok) - len(conflicts), "other_statuses": others,
        "patch_ok_per_s": len(ok) / phase.seconds, "patch_attempts_per_s": len(phase.patches) / phase.seconds,
        "share_409_pct": 100 * len(conflicts) / max(1, len(phase.patches)),
        "patch_ms": percentiles([p.ms for p in phase.patches]),
        "patch_ok_ms": percentiles([p.ms for p in ok]),
        "patch_409_ms": percentiles([p.ms for p in conflicts]),
        "get_ms": percentiles(phase.gets_ms),
        "patch_ok_p50_first_fifth_ms": percentiles([p.ms for p in ok[:fifth]], (50,))["p50"],
        "patch_ok_p50_last_fifth_ms": percentiles([p.ms for p in ok[-fifth:]], (50,))["p50"],
        "final_lines": {"min": min(lines), "max": max(lines)},
        "lost_updates": lost_updates(phase, finals),
        "process_cpu_pct": (cpu1 - cpu0) / wall * 100,
        "loadgen_cpu_pct": phase.cpu_s / phase.seconds * 100,
        "cpu0_busy_pct": (busy1 - busy0) / wall * 100,
        "postgres_cpu_pct": sum(v - pg0.get(pid, 0.0) for pid, v in pg1.items()) / wall * 100,
        "loadavg_before": load_before, "loadavg_after": list(os.getloadavg()),
    }


def row(name: str, figures: dict[str, Any]) -> list[str]:
    lost = figures["lost_updates"]
    return [name, str(figures["clients"]), str(figures["owners"]), f"{figures['patch_ok_per_s']:.1f}",
            f"{figures['patch_attempts_per_s']:.1f}",
            "/".join(f"{v:.1f}" for v in figures["patch_ms"].values()),
            "/".join(f"{v:.1f}" for v in figures["patch_ok_ms"].values()),
            f"{figures['share_409_pct']:.1f}", str(figures["patch_other"]),
            str(lost["missing"] + lost["doubled"] + lost["unexpected_lines"] + lost["owners_with_wrong_revision"]),
            f"{figures['patch_ok_p50_first_fifth_ms']:.1f} -> {figures['patch_ok_p50_last_fifth_ms']:.1f}",
            f"{figures['process_cpu_pct']:.0f}", f"{figures['postgres_cpu_pct']:.0f}",
            f"{figures['loadgen_cpu_pct']:.0f}", f"{figures['cpu0_busy_pct']:.0f}"]


HEADER = ["phase", "clients", "owners", "PATCH 200/s", "PATCH/s", "PATCH p50/p95/p99 ms", "200s p50/p95/p99 ms",
          "409 %", "other", "lost", "200 p50 first->last fifth", "server CPU %", "postgres CPU %",
          "clients CPU %", "cpu0 busy %"]


def package_of(file: str) -> str:
    """Where a profiled function lives: a site-packages package, a voicegate package, the stdlib, or C."""
    if file == "~":
        return "C calls (builtins, sockets, numpy)"
    for marker, prefix in (("site-packages/", ""), ("/internal/", "internal/"), ("/server/", "server/"),
                           ("/bench/", "bench/"), ("python3.11/", "stdlib/")):
        if marker in file:
            return prefix + file.split(marker, 1)[1].split("/", 1)[0].removesuffix(".py")
    return Path(file).name


def profile_top(profiler: cProfile.Profile, count: int = 15) -> dict[str, list[list[str]]]:
    """The top functions by own CPU time, and own CPU time summed by package (C calls by their caller's)."""
    entries = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in entries.values()) or 1.0
    packages: dict[str, float] = {}
    for (file, _line, _name), values in entries.items():
        # A C function's time goes to the packages that called it (av's resampler to internal/audio...).
        shares = [(package_of(caller[0]), edge[2]) for caller, edge in values[4].items()] if file == "~" else []
        for package, own in shares or [(package_of(file), values[2])]:
            packages[package] = packages.get(package, 0.0) + own
    functions = sorted(entries.items(), key=lambda item: item[1][2], reverse=True)[:count]
    return {
        "packages": [[name, f"{own:.2f}", f"{100 * own / total:.1f}"]
                     for name, own in sorted(packages.items(), key=lambda item: item[1], reverse=True)[:count]],
        "functions": [[f"{Path(file).name}:{line}({name})", str(nc), f"{tt:.2f}", f"{100 * tt / total:.1f}",
                       f"{ct:.2f}"] for (file, line, name), (_cc, nc, tt, ct, _callers) in functions],
    }


def bench_config(directory: Path, uri: str) -> Config:
    from voicegate.internal.config import load_config

    config = load_config(None)
    config.server.host = "127.0.0.1"
    config.server.data_dir = str(directory / "data")
    config.server.jwt_secret = SECRET
    config.server.patch_rate_per_min = 0
    config.sip.enabled = False
    config.telemetry.log_level = "warning"
    config.memory.enabled = True
    config.memory.provider = "pgvector"
    config.memory.embedding = "wordllama"
    config.memory.max_chars = MAX_CHARS
    config.pgvector.connection_string = uri
    return config


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=20, help="M: concurrent clients (GET + PATCH loops)")
    parser.add_argument("--seconds", type=float, default=20, help="T: length of each phase")
    parser.add_argument("--in-process", action="store_true",
                        help="run the clients in this process too (cheaper to set up; they cost as much as the server)")
    parser.add_argument("--profile", action="store_true", help="cProfile (CPU time) the server during both phases")
    args = parser.parse_args()
    from tests.pipeline.conftest import ScriptedStt
    from tests.webrtc.harness import live_server
    from voicegate.internal.db import EmbeddedPostgres
    from voicegate.internal.llm.local import LocalAgent

    logging.getLogger("pgserver").setLevel(logging.WARNING)  # it logs every pg_ctl command line at INFO
    results: dict[str, Any] = {"clients": args.clients, "seconds": args.seconds,
                               "load_generator": "in-process" if args.in_process else "separate process",
                               "loadavg_start": list(os.getloadavg())}
    rows = []
    profiles: dict[str, dict[str, list[list[str]]]] = {}
    with tempfile.TemporaryDirectory(prefix="voicegate-api-bench-") as directory:
        postgres = EmbeddedPostgres(Path(directory))
        uri = await postgres.start()
        meter = CpuMeter(postgres.pgdata)
        try:
            config = bench_config(Path(directory), uri)
            async with live_server(config, stt=ScriptedStt([]), model=LocalAgent()) as live:
                limits = httpx.Limits(max_connections=args.clients * 2, max_keepalive_connections=args.clients * 2)
                async with httpx.AsyncClient(base_url=live.url, timeout=60, limits=limits) as http:
                    phases = {"own": [f"owner-{n}" for n in range(args.clients)],
                              "shared": ["shared-owner"] * args.clients}
                    for name, owners in phases.items():
                        profiler = cProfile.Profile(time.thread_time) if args.profile else None
                        figures = await run_phase(http, name, owners, args, meter, profiler)
                        results[name] = figures
                        rows.append(row(name, figures))
                        if profiler is not None:
                            profiles[name] = profile_top(profiler)
        finally:
            await postgres.stop()
    results["loadavg_end"] = list(os.getloadavg())
    results["profile"] = profiles
    print(table(rows, HEADER))
    if args.profile:
        print("(measured under cProfile, which roughly doubles the CPU cost: run without --profile for figures)")
    print("load average (1/5/15 min) at start {:.2f}/{:.2f}/{:.2f}, at end {:.2f}/{:.2f}/{:.2f}".format(
        *results["loadavg_start"], *results["loadavg_end"]))
    for name, top in profiles.items():
        who = "server and clients" if args.in_process else "the server"
        print(f"\n{name}: {who} under cProfile (CPU time of the event-loop thread), by package and by function:")
        print(table(top["packages"], ["package", "own s", "own %"]))
        print(table(top["functions"], ["function", "calls", "own s", "own %", "cum s"]))
    print(f"results: {save('api_memory', results)}")


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "--loadgen":
        pin(CLIENT_CPU)
        loadgen(sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6].split(","))
    else:
        asyncio.run(main())
