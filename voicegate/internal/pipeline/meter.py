"""A call's turn measurements: stage latencies (metrics, and timing events when debugging), turn-taking
outcomes, and the child spans of a turn's trace recorded after the fact."""

from __future__ import annotations

import time
from collections.abc import Callable

from voicegate.internal.conversation.state import CallContext
from voicegate.internal.event_envelope import EventSink
from voicegate.internal.pipeline.events import TimingEvent, TurnEvent, TurnOutcome
from voicegate.internal.pipeline.services import PipelineServices
from voicegate.internal.turn.pending import Release


class TurnMeter:
    def __init__(self, session: CallContext, services: PipelineServices, sink: EventSink,
                 clock: Callable[[], float]) -> None:
        self.session = session
        self.services = services
        self.sink = sink
        # time.time_ns() - monotonic, so spans recorded after the fact carry wall-clock times
        self._wall_offset_ns = time.time_ns() - int(clock() * 1e9)

    def timing(self, stage: str, ms: float, turn: int = 0) -> None:
        if self.services.telemetry is not None:
            self.services.telemetry.stage(stage, ms)
        if self.services.config.debug:
            self.sink.emit(TimingEvent(stage=stage, ms=round(ms, 2), turn=turn or self.session.conversation.turns))

    def turn_event(self, outcome: TurnOutcome) -> None:
        if self.services.telemetry is not None:
            self.services.telemetry.turn_event(outcome)
        self.sink.emit(TurnEvent(outcome=outcome))

    def released(self, release: Release) -> None:
        """Why the caller's turn was answered when it was, as a metric (the turn owner emits the `release`
        event itself: internal/turn/events.py)."""
        if self.services.telemetry is not None:
            self.services.telemetry.turn_event(f"released_{release.reason}")

    def ns(self, monotonic_s: float) -> int:
        return int(monotonic_s * 1e9) + self._wall_offset_ns

    def stage_span(self, name: str, start: float, end: float) -> None:
        if start and end and end >= start:
            self.services.tracer.start_span(name, start_time=self.ns(start)).end(end_time=self.ns(end))
