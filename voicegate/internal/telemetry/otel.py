"""OpenTelemetry traces and metrics for voicegate, and the Prometheus text behind GET /metrics.

One `Telemetry` object per server (built at the composition root, passed in; never a global provider):
- a tracer: a span per session, a span per turn, and child spans per stage (endpointing, STT, LLM first
  token, TTS first audio, memory reads and writes, retrieval), exported to the console, OTLP (when the
  `opentelemetry-exporter-otlp` package is installed) or an in-memory exporter (tests);
- instruments: turn latency histograms by stage, live sessions, calls by transport and outcome, RTP
  packets lost, memory operations by source and outcome, asyncio tasks alive. An in-memory reader renders them as
  Prometheus text on demand; a push exporter (console/OTLP) can be added beside it.
Log lines carry the current trace and span ids (see logs.py).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry import trace
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    HistogramDataPoint,
    InMemoryMetricReader,
    MetricReader,
    NumberDataPoint,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from voicegate.internal.config.providers import TelemetryConfig
from voicegate.internal.telemetry.loop_lag import LoopLag
from voicegate.internal.telemetry.queues import WorkQueue

log = logging.getLogger(__name__)

LATENCY_BUCKETS_MS = (5, 10, 25, 50, 100, 200, 400, 800, 1500, 3000, 6000)
AMD_BUCKETS_MS = (500, 1000, 1500, 2000, 2500, 3000, 4000, 5000, 8000)


def current_trace_id() -> str | None:
    """The trace id of the current span (a call's turn, an HTTP request) as 32 hex digits, for records
    that must be matched with their trace later (memory changes); None outside a recording trace."""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


def _otlp_span_exporter(endpoint: str) -> SpanExporter | None:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # type: ignore
    except ImportError:
        log.warning("telemetry.traces = otlp needs the opentelemetry-exporter-otlp package; traces are off")
        return None
    return OTLPSpanExporter(endpoint=endpoint) if endpoint else OTLPSpanExporter()  # type: ignore[no-any-return]


class Telemetry:
    def __init__(self, config: TelemetryConfig, version: str = "", node_id: str = "") -> None:
        attributes = {"service.name": config.service_name, "service.version": version}
        if node_id:  # the OpenTelemetry name for "which process of the service" (server/node.py)
            attributes["service.instance.id"] = node_id
        resource = Resource.create(attributes)
        self.spans: InMemorySpanExporter | None = None
        self._tracer_provider: TracerProvider | None = None
        if config.traces != "none":
            provider = TracerProvider(resource=resource)
            if config.traces == "memory":
                self.spans = InMemorySpanExporter()
                provider.add_span_processor(SimpleSpanProcessor(self.spans))
            elif config.traces == "console":
                provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
            elif (exporter := _otlp_span_exporter(config.otlp_endpoint)) is not None:
                provider.add_span_processor(BatchSpanProcessor(exporter))
            self._tracer_provider = provider
        self.tracer: trace.Tracer = (self._tracer_provider.get_tracer("voicegate") if self._tracer_provider
                                     else trace.NoOpTracer())
        self._reader = InMemoryMetricReader()
        readers: list[MetricReader] = [self._reader]
        if config.traces == "console":
            readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter(), export_interval_millis=60_000))
        views = [View(instrument_name=name, aggregation=ExplicitBucketHistogramAggregation(LATENCY_BUCKETS_MS))
                 for name in ("voicegate_turn_latency_ms", "voicegate_worker_wait_ms", "voicegate_worker_service_ms",
                              "voicegate_tool_call_ms", "voicegate_event_loop_lag_ms")]
        views.append(View(instrument_name="voicegate_amd_decision_ms",
                          aggregation=ExplicitBucketHistogramAggregation(AMD_BUCKETS_MS)))
        self._meter_provider = MeterProvider(metric_readers=readers, resource=resource, views=views)
        meter = self._meter_provider.get_meter("voicegate")
        self.turn_latency = meter.create_histogram("voicegate_turn_latency_ms", unit="ms",
                                                   description="Time of each turn stage")
        self.worker_waits = meter.create_histogram(
            "voicegate_worker_wait_ms", unit="ms",
            description="Time an utterance or sentence waited for a free worker, by pool")
        self.worker_services = meter.create_histogram(
            "voicegate_worker_service_ms", unit="ms",
            description="Time a worker spent on each call (a decode, a batch, a sentence, a verdict), by pool")
        self._queues: Callable[[], list[WorkQueue]] = list
        meter.create_observable_gauge("voicegate_worker_queue", callbacks=[self._observe_queues],
                                      description="Items waiting for (and held by) each pool's workers")
        self.calls = meter.create_counter("voicegate_calls_total", description="Calls ended, by transport and outcome")
        self.calls_refused = meter.create_counter(
            "voicegate_calls_refused_total",
            description="New calls refused, by transport and reason (capacity, queue, loop_lag, max_sessions, "
                        "draining): docs/scaling.md")
        self.rtp_lost = meter.create_counter("voicegate_rtp_packets_lost_total", description="RTP packets lost")
        self.srtp_rejected = meter.create_counter(
            "voicegate_srtp_packets_rejected_total",
            description="SRTP/SRTCP packets dropped: failed authentication or a replay")
        self.sip_connections_refused = meter.create_counter(
            "voicegate_sip_connections_refused_total",
            description="SIP TCP/TLS connections closed on accept: sip.max_connections (reason total) or "
                        "sip.max_connections_per_source (reason per_source) reached")
        self.rtp_rejected_sources = meter.create_counter(
            "voicegate_rtp_rejected_source_packets_total",
            description="RTP packets from a host the call's SDP and signalling never named, refused by the latch")
        self.turn_events = meter.create_counter(
            "voicegate_turn_events_total",
            description="Turn-taking outcomes: prepared replies used or discarded, callers who went on after a release")
        self.memory_operations = meter.create_counter("voicegate_memory_operations_total",
                                                      description="Memory write attempts by source and outcome")
        self._instrument_recordings_and_tools(meter)
        self.amd_decisions = meter.create_counter(
            "voicegate_amd_decisions_total",
            description="Answering-machine detection on outbound calls: decisions by result, reason and outcome")
        self.amd_decision_ms = meter.create_histogram(
            "voicegate_amd_decision_ms", unit="ms", description="From the answer to the answering-machine decision")
        self._live: Callable[[], dict[str, int]] = dict
        meter.create_observable_gauge("voicegate_live_sessions", callbacks=[self._observe_live],
                                      description="Live sessions on this node, by transport")
        self._registrations: Callable[[], list[tuple[dict[str, str], bool]]] = list
        # An info metric: join it on instance to label any series with the node it came from.
        node_labels = {"node_id": node_id} if node_id else {}
        meter.create_observable_gauge("voicegate_node_info", callbacks=[lambda _: [Observation(1, node_labels)]],
                                      description="Always 1; node_id names this process (server.node_id)")
        meter.create_observable_gauge("voicegate_sip_registration_up", callbacks=[self._observe_registrations],
                                      description="1 while a [[sip.registrations]] account is registered, else 0")
        # Every call runs as tasks; once its calls have ended an idle node is back to its own few, so a
        # count that keeps growing is a leak an operator (and the cluster soak test) can see from outside.
        self._loop: asyncio.AbstractEventLoop | None = None
        meter.create_observable_gauge("voicegate_event_loop_tasks", callbacks=[self._observe_tasks],
                                      description="asyncio tasks alive in this node's event loop")
        self.loop_lags = meter.create_histogram(
            "voicegate_event_loop_lag_ms", unit="ms",
            description="How much later than asked the event loop woke, sampled every 100 ms")
        self._loop_lag: LoopLag | None = None
        meter.create_observable_gauge(
            "voicegate_event_loop_lag_sustained_ms", unit="ms", callbacks=[self._observe_loop_lag],
            description="Median event-loop lateness over the last 5 s (what server.shed_loop_lag_ms sheds on)")

    def _instrument_recordings_and_tools(self, meter: Any) -> None:
        self.recordings = meter.create_counter(
            "voicegate_recordings_total",
            description="Call recordings finished and kept, by consent outcome and format")
        self.recording_bytes = meter.create_counter("voicegate_recording_bytes_total", unit="By",
                                                    description="Bytes of call recordings kept")
        self.recording_gaps = meter.create_counter(
            "voicegate_recording_gap_seconds_total", unit="s",
            description="Recorded audio written as silence because the disk could not keep up")
        self._stored: Callable[[], tuple[int, int]] = lambda: (0, 0)
        meter.create_observable_gauge("voicegate_recordings_stored", callbacks=[lambda _: [
            Observation(self._stored()[0])]], description="Call recordings on this node's disk (as of the last sweep)")
        meter.create_observable_gauge("voicegate_recordings_stored_bytes", unit="By", callbacks=[lambda _: [
            Observation(self._stored()[1])]], description="Bytes of call recordings on this node's disk")
        self.tool_calls = meter.create_counter(
            "voicegate_tool_calls_total",
            description="Tool calls by tool, source (builtin, or mcp:<server>) and outcome "
                        "(ok, error, timeout, cancelled)")
        self.tool_latency = meter.create_histogram("voicegate_tool_call_ms", unit="ms",
                                                   description="Duration of each tool call, by tool and source")

    def watch_recordings(self, stored: Callable[[], tuple[int, int]]) -> None:
        self._stored = stored

    def recording_kept(self, consent: str, kind: str, size: int, gaps_s: float) -> None:
        self.recordings.add(1, {"consent": consent, "format": kind})
        self.recording_bytes.add(size)
        if gaps_s:
            self.recording_gaps.add(gaps_s)

    def tool_call(self, tool: str, source: str, outcome: str, ms: float) -> None:
        self.tool_calls.add(1, {"tool": tool, "source": source, "outcome": outcome})
        self.tool_latency.record(ms, {"tool": tool, "source": source})

    def watch_live_sessions(self, count: Callable[[], dict[str, int]]) -> None:
        self._live = count

    def watch_registrations(self, states: Callable[[], list[tuple[dict[str, str], bool]]]) -> None:
        """`states` gives (labels, registered) per SIP registration, read at each scrape."""
        self._registrations = states

    def watch_worker_queues(self, queues: list[WorkQueue]) -> None:
        """Export these pools' queue lengths, and record every wait they report."""
        for queue in queues:
            queue.observer = self.worker_wait
            queue.service_observer = self.worker_service
        self._queues = lambda: queues

    def worker_wait(self, pool: str, ms: float) -> None:
        self.worker_waits.record(ms, {"pool": pool})

    def worker_service(self, pool: str, ms: float) -> None:
        self.worker_services.record(ms, {"pool": pool})

    def _observe_queues(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(value, {"pool": queue.pool, "state": state}) for queue in self._queues()
                for state, value in (("waiting", queue.waiting), ("running", queue.running))]

    def watch_event_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def watch_loop_lag(self, lag: LoopLag) -> None:
        lag.observer = self.loop_lags.record
        self._loop_lag = lag

    def _observe_loop_lag(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(self._loop_lag.sustained_ms())] if self._loop_lag is not None else []

    def _observe_tasks(self, options: CallbackOptions) -> Iterable[Observation]:
        # all_tasks(loop) rather than the running loop's: a push exporter scrapes from a thread of its own.
        return [Observation(len(asyncio.all_tasks(self._loop)))] if self._loop is not None else []

    def _observe_registrations(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(1 if up else 0, labels) for labels, up in self._registrations()]

    def _observe_live(self, options: CallbackOptions) -> Iterable[Observation]:
        counts = self._live() or {"sip": 0, "webrtc": 0}
        return [Observation(value, {"transport": transport}) for transport, value in counts.items()]

    def stage(self, stage: str, ms: float) -> None:
        self.turn_latency.record(ms, {"stage": stage})

    def turn_event(self, outcome: str) -> None:
        self.turn_events.add(1, {"outcome": outcome})

    def prometheus(self) -> str:
        data = self._reader.get_metrics_data()
        return render_prometheus(data) if data is not None else ""

    def shutdown(self) -> None:
        if self._tracer_provider is not None:
            self._tracer_provider.shutdown()
        self._meter_provider.shutdown()


def _labels(attributes: Any, extra: dict[str, str] | None = None) -> str:
    items = {**{str(k): str(v) for k, v in dict(attributes or {}).items()}, **(extra or {})}
    if not items:
        return ""
    escaped = (f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
               for k, v in sorted(items.items()))
    return "{" + ",".join(escaped) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if isinstance(value, float) and not value.is_integer() else str(int(value))


def render_prometheus(data: Any) -> str:
    """Prometheus text exposition (version 0.0.4) of an OpenTelemetry MetricsData."""
    lines: list[str] = []
    for resource_metrics in data.resource_metrics:
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                name = metric.name
                points = list(metric.data.data_points)
                if not points:
                    continue
                if isinstance(points[0], HistogramDataPoint):
                    lines += [f"# HELP {name} {metric.description}", f"# TYPE {name} histogram"]
                    for point in points:
                        cumulative = 0
                        for bound, count in zip([*point.explicit_bounds, math.inf], point.bucket_counts,
                                                strict=True):
                            cumulative += count
                            lines.append(f"{name}_bucket{_labels(point.attributes, {'le': _number(bound)})} "
                                         f"{cumulative}")
                        lines.append(f"{name}_sum{_labels(point.attributes)} {_number(point.sum)}")
                        lines.append(f"{name}_count{_labels(point.attributes)} {point.count}")
                    continue
                monotonic = getattr(metric.data, "is_monotonic", False)
                kind = "counter" if monotonic else "gauge"
                lines += [f"# HELP {name} {metric.description}", f"# TYPE {name} {kind}"]
                for point in points:
                    if isinstance(point, NumberDataPoint):
                        lines.append(f"{name}{_labels(point.attributes)} {_number(point.value)}")
    return "\n".join(lines) + "\n"
