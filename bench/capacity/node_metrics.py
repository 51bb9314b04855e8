"""What a voicegate node reports about itself while a benchmark loads it, for bench/capacity/conversations.py: its
GET /metrics (Prometheus text) scraped before, during and after a step, turned into where callers waited,
and the CPU and resident memory of its process tree (the server and its Whisper and Piper workers).

The worker-queue series (`voicegate_worker_wait_ms`, `voicegate_worker_service_ms`,
`voicegate_worker_queue`) are new in the server; a node without them, or with metrics off, gives empty
figures here rather than an error, so the benchmark still measures what it hears on the wire.
"""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass, field
from typing import Any

WORKER_WAIT = "voicegate_worker_wait_ms"  # histogram, label pool: time an item waited for a free worker
WORKER_SERVICE = "voicegate_worker_service_ms"  # histogram, label pool: time a worker spent on it
WORKER_QUEUE = "voicegate_worker_queue"  # gauge, labels pool and state ("waiting", "running")
TURN_LATENCY = "voicegate_turn_latency_ms"  # histogram, label stage
LOOP_LAG = "voicegate_event_loop_lag_ms"  # histogram: how late the event loop woke, every 100 ms
LOOP_LAG_SUSTAINED = "voicegate_event_loop_lag_sustained_ms"  # gauge: the median of the last 5 s
RTP_LOST = "voicegate_rtp_packets_lost_total"  # counter: what the node's receivers missed, added at hang-up
# A pool whose items waited longer than this on average is where callers wait; below it, queueing is
# noise beside a reply's own stages (Smart Turn's ~90 ms verdict, a 300 ms decode).
BOTTLENECK_WAIT_MS = 100.0

Series = tuple[str, tuple[tuple[str, str], ...]]  # metric name, sorted (label, value) pairs
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def parse_prometheus(text: str) -> dict[Series, float]:
    """Every sample of a Prometheus text exposition (0.0.4) by name and labels; comments, and lines that
    do not parse, are left out."""
    samples: dict[Series, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        found = _LINE.match(line)
        if found is None:
            continue
        name, labels, value = found.groups()
        pairs = []
        for label in _LABEL.finditer(labels or ""):
            unescaped = re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), label.group(2))
            pairs.append((label.group(1), unescaped))
        try:
            number = float(value)  # also +Inf, -Inf, NaN
        except ValueError:
            continue
        samples[(name, tuple(sorted(pairs)))] = number
    return samples


@dataclass(frozen=True)
class Scrape:
    at: float  # time.time() when it was read
    samples: dict[Series, float]


def by_label(samples: dict[Series, float], name: str, label: str,
             where: dict[str, str] | None = None) -> dict[str, float]:
    """The samples of `name` keyed by their `label` value (those whose labels include `where`)."""
    out: dict[str, float] = {}
    for (metric, pairs), value in samples.items():
        labels = dict(pairs)
        if metric == name and label in labels and all(labels.get(k) == v for k, v in (where or {}).items()):
            out[labels[label]] = out.get(labels[label], 0.0) + value
    return out


def histogram_means(before: dict[Series, float], after: dict[Series, float], name: str,
                    label: str) -> dict[str, tuple[int, float]]:
    """Per `label` value: (observations, mean) of histogram `name` between two scrapes."""
    sums = by_label(after, f"{name}_sum", label)
    counts = by_label(after, f"{name}_count", label)
    sums0, counts0 = by_label(before, f"{name}_sum", label), by_label(before, f"{name}_count", label)
    out = {}
    for key, count in counts.items():
        observed = round(count - counts0.get(key, 0.0))
        if observed > 0:
            out[key] = (observed, (sums.get(key, 0.0) - sums0.get(key, 0.0)) / observed)
    return out


def counter_delta(before: dict[Series, float], after: dict[Series, float], name: str) -> float | None:
    """How much counter `name` (all its series together) rose between two scrapes; None when absent."""
    total = [v for (metric, _), v in after.items() if metric == name]
    if not total:
        return None
    return sum(total) - sum(v for (metric, _), v in before.items() if metric == name)


@dataclass
class WhereCallersWait:
    pool_wait_ms: dict[str, float] = field(default_factory=dict)  # mean wait for a worker, per pool
    pool_waits: dict[str, int] = field(default_factory=dict)  # items that waited (and were taken), per pool
    pool_service_ms: dict[str, float] = field(default_factory=dict)  # mean time a worker spent per item
    pool_max_waiting: dict[str, float] = field(default_factory=dict)  # deepest queue seen in the samples
    pool_max_running: dict[str, float] = field(default_factory=dict)
    stage_ms: dict[str, float] = field(default_factory=dict)  # mean of each turn stage
    rtp_lost: float | None = None  # packets the node's receivers missed (SIP calls)
    loop_lag_ms: float | None = None  # mean lateness of the event loop over the step
    loop_lag_sustained_max_ms: float = 0.0  # the worst 5 s median seen in the samples
    scrapes: int = 0
    bottleneck: str = "-"


def where_callers_wait(before: Scrape | None, after: Scrape | None, during: list[Scrape]) -> WhereCallersWait:
    """The step's figures from /metrics; empty when the node gave none (metrics off, an older server)."""
    figures = WhereCallersWait(scrapes=len(during) + (before is not None) + (after is not None))
    if before is None or after is None:
        return figures
    waits = histogram_means(before.samples, after.samples, WORKER_WAIT, "pool")
    figures.pool_wait_ms = {pool: mean for pool, (_, mean) in waits.items()}
    figures.pool_waits = {pool: count for pool, (count, _) in waits.items()}
    figures.pool_service_ms = {pool: mean for pool, (_, mean)
                               in histogram_means(before.samples, after.samples, WORKER_SERVICE, "pool").items()}
    figures.stage_ms = {stage: mean for stage, (_, mean)
                        in histogram_means(before.samples, after.samples, TURN_LATENCY, "stage").items()}
    for scrape in [before, *during, after]:
        for state, deepest in (("waiting", figures.pool_max_waiting), ("running", figures.pool_max_running)):
            for pool, depth in by_label(scrape.samples, WORKER_QUEUE, "pool", {"state": state}).items():
                deepest[pool] = max(deepest.get(pool, 0.0), depth)
    figures.rtp_lost = counter_delta(before.samples, after.samples, RTP_LOST)
    lag_sum = counter_delta(before.samples, after.samples, f"{LOOP_LAG}_sum")
    lag_count = counter_delta(before.samples, after.samples, f"{LOOP_LAG}_count")
    figures.loop_lag_ms = lag_sum / lag_count if lag_sum is not None and lag_count else None
    figures.loop_lag_sustained_max_ms = max(
        (value for scrape in [before, *during, after] for (name, _), value in scrape.samples.items()
         if name == LOOP_LAG_SUSTAINED), default=0.0)
    figures.bottleneck = bottleneck(figures.pool_wait_ms, figures.stage_ms,
                                    loop_lag_ms=figures.loop_lag_sustained_max_ms)
    return figures


def bottleneck(pool_wait_ms: dict[str, float], stage_ms: dict[str, float],
               threshold_ms: float = BOTTLENECK_WAIT_MS, loop_lag_ms: float = 0.0) -> str:
    """Where callers wait: the event loop when it ran late (its worst 5 s median, `loop_lag_ms`) past
    `threshold_ms` (everything on it waits); else the pool with the longest mean wait for a worker once
    that is over `threshold_ms` (callers queue there), otherwise the slowest turn stage (the work itself is
    slow). Stages overlap (end_of_turn holds stt), so the slowest is often end_of_turn; its name says which."""
    if loop_lag_ms > threshold_ms:
        return f"event loop {loop_lag_ms:.0f} ms late"
    if pool_wait_ms:
        pool, wait = max(pool_wait_ms.items(), key=lambda item: item[1])
        if wait > threshold_ms:
            return f"{pool} queue {wait:.0f} ms"
    if stage_ms:
        stage, mean = max(stage_ms.items(), key=lambda item: item[1])
        return f"{stage} {mean:.0f} ms"
    return "-"


# The parts of a reply that do not contain one another, each with its own queue inside it: the words
# (stt, Whisper's queue and decode), the end-of-turn model's verdict, the agent's first words, the first
# sentence's synthesis (Piper's queue and render). end_of_turn and first_audio span several of them.
PART_STAGES = ("stt", "end_of_turn_model", "llm_first_token", "tts_first_audio")


def limiting_stage(stage_ms: dict[str, float], reference_ms: dict[str, float] | None = None) -> str:
    """The part of a reply that grew most over the reference step (a lightly loaded node): where the load
    itself made callers wait. Without a reference (the first step), the slowest part."""
    parts = {stage: mean for stage, mean in stage_ms.items() if stage in PART_STAGES}
    if not parts:
        return "-"
    if reference_ms is None:
        stage, mean = max(parts.items(), key=lambda item: item[1])
        return f"{stage} {mean:.0f} ms"
    growth = {stage: mean - reference_ms.get(stage, mean) for stage, mean in parts.items()}
    stage, added = max(growth.items(), key=lambda item: item[1])
    return f"{stage} {parts[stage]:.0f} ms ({added:+.0f})"


async def scrape(http: Any, url: str) -> Scrape | None:
    """GET /metrics with an httpx.AsyncClient; None when the node does not answer with metrics."""
    import httpx

    try:
        response = await http.get(url, timeout=5.0)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    return Scrape(time.time(), parse_prometheus(response.text))


# ---- the node's processes ------------------------------------------------------------------------------


def merged(scrapes: list[Scrape | None]) -> Scrape | None:
    """Several nodes' scrapes as one node's: each series summed (counters, histograms and queue depths add
    up across nodes). None when any node gave none."""
    if not scrapes or any(s is None for s in scrapes):
        return None
    samples: dict[Series, float] = {}
    for one in scrapes:
        assert one is not None
        for series, value in one.samples.items():
            samples[series] = samples.get(series, 0.0) + value
    return Scrape(max(s.at for s in scrapes if s is not None), samples)


class ProcessTreeMeter:
    """CPU seconds and resident memory of processes and all their descendants (Whisper workers, Piper):
    one node's server, or every node's."""

    def __init__(self, *pids: int) -> None:
        self.pids = pids
        self.peak_rss = 0
        self.rss_samples: list[tuple[float, int]] = []

    def cpu_seconds(self) -> float:
        from bench.common.figures import process_tree_cpu_seconds

        return sum(process_tree_cpu_seconds(pid) for pid in self.pids)

    def sample_rss(self) -> int:
        """The trees' resident set now (bytes), kept for the peak."""
        import psutil

        tree = []
        for pid in self.pids:
            with contextlib.suppress(psutil.NoSuchProcess):
                root = psutil.Process(pid)
                tree += [root, *root.children(recursive=True)]
        total = 0
        for process in tree:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                total += process.memory_info().rss
        self.peak_rss = max(self.peak_rss, total)
        self.rss_samples.append((time.time(), total))
        return total
