"""Shared pieces of the benchmarks: percentiles, a progress line, CPU and memory meters, results as JSON."""

from __future__ import annotations

import json
import os
import platform
import re
import resource
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"


def percentiles(values: list[float], points: tuple[int, ...] = (50, 95, 99)) -> dict[str, float]:
    if not values:
        return {f"p{p}": float("nan") for p in points}
    ordered = sorted(values)
    out = {}
    for p in points:
        index = min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))
        out[f"p{p}"] = ordered[index]
    return out


def progress(label: str, done: int, total: int) -> None:
    """A progress bar on a terminal; a line per tenth when stderr is a file or a pipe."""
    if not sys.stderr.isatty():
        step = max(1, total // 10)
        if done % step == 0 or done >= total:
            sys.stderr.write(f"{label}: {done}/{total}\n")
        return
    width = 30
    filled = width * done // max(total, 1)
    sys.stderr.write(f"\r{label}: [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "machine": platform.machine(),
            "processor": platform.processor() or platform.machine()}


def save(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    data = {"benchmark": name, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(),
            **data}
    path.write_text(json.dumps(data, indent=2))
    return path


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def pin(cpu: int) -> bool:
    """This process (and what it starts later) on `cpu`, when there are two CPUs to share."""
    if len(os.sched_getaffinity(0)) < 2:
        return False
    os.sched_setaffinity(0, {cpu})
    return True


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def cpu_busy_seconds(cpu: int) -> float:
    """Time CPU `cpu` spent doing anything (every process, interrupts), from /proc/stat."""
    ticks = os.sysconf("SC_CLK_TCK")
    for line in Path("/proc/stat").read_text().splitlines():
        fields = line.split()
        if fields[0] == f"cpu{cpu}":
            values = [int(v) for v in fields[1:9]]
            return (sum(values) - values[3] - values[4]) / ticks  # minus idle and iowait
    return 0.0


def process_tree_cpu_seconds(pid: int) -> float:
    """User + system CPU of process `pid` and every descendant, alive or already reaped by its parent.

    0.0 once `pid` has gone: a meter read on either side of a window is then a clear zero, not a crash.
    """
    import psutil

    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for process in tree:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:  # a child that exited between listing and reading
            continue
        # children_*: children that exited and were waited for, so a worker that came and went counts.
        total += times.user + times.system + times.children_user + times.children_system
    return total


def machine_busy_seconds() -> float:
    """Time every CPU together spent doing anything, from /proc/stat's first line: user, nice, system,
    irq and softirq; not idle, iowait or steal (the hypervisor running someone else's machine)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def resident_kib() -> int:
    """This process's resident set size, from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def word_errors(reference: str, heard: str) -> tuple[int, int]:
    """(edits, reference words) between two texts: case and punctuation ignored, digits spelled out."""
    digits = "zero one two three four five six seven eight nine".split()

    def words(text: str) -> list[str]:
        text = re.sub(r"\d", lambda m: f" {digits[int(m.group())]} ", text.lower())
        return re.findall(r"[a-z']+", text.replace("-", " "))

    ref, hyp = words(reference), words(heard)
    row = list(range(len(hyp) + 1))
    for i in range(1, len(ref) + 1):
        diagonal, row[0] = row[0], i
        for j in range(1, len(hyp) + 1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (ref[i - 1] != hyp[j - 1]))
    return row[len(hyp)], len(ref)


def pipeline_settings(pairs: list[str]) -> dict[str, Any]:
    """`pipeline.KEY=VALUE` pairs, each value of the key's own type (checked by the config model)."""
    from voicegate.internal.config.sections import PipelineConfig

    values: dict[str, str] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if not key.startswith("pipeline.") or not value:
            raise SystemExit(f"--set takes pipeline.KEY=VALUE, not {pair!r}")
        values[key.removeprefix("pipeline.")] = value
    return PipelineConfig.model_validate(values).model_dump(include=set(values))
