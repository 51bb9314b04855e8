"""Traces, metrics and log correlation for a scripted call through the real gateway."""

from __future__ import annotations

import io
import json
import logging
import re
from pathlib import Path

import httpx

from tests.conftest import tone_driven
from tests.pipeline.conftest import ScriptedStt
from tests.speech import silence, tone
from voicegate.internal.config import load_config
from voicegate.internal.event_envelope import CollectingSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.pipeline.localcall import LocalCall
from voicegate.internal.telemetry import configure_logging
from voicegate.internal.telemetry.otel import Telemetry
from voicegate.server.app import create_gateway_application
from voicegate.server.gateway import Gateway

LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"'
PROMETHEUS_LINE = re.compile(rf"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{{{LABEL}(,{LABEL})*\}})? (-?[0-9.e+-]+|\+Inf|NaN)$")


def config_for(tmp_path: Path):  # type: ignore[no-untyped-def]
    config = load_config(None)
    config.server.data_dir = str(tmp_path / "data")
    config.sip.enabled = False
    config.telemetry.traces = "memory"
    config.memory.enabled = True
    config.memory.provider = "memory"
    config.pipeline.greeting = ""
    return tone_driven(config)


async def run_call(gateway: Gateway) -> None:
    assert gateway.sessions is not None
    session = await gateway.open_session(CallerIdentity("jwt", "alice"), "webrtc")
    pipeline = gateway.new_pipeline(session, 16000, CollectingSink())
    async with LocalCall(pipeline, speed=4.0) as call:
        call.say(silence(200) + tone(500) + silence(100))
        await call.wait_caller_done()
        await call.wait_agent_quiet(300)
    await gateway.sessions.end(session, "caller hung up")
    await gateway.sessions.drain()


async def test_a_call_produces_a_session_span_with_turn_and_stage_children(tmp_path: Path) -> None:
    gateway = Gateway(config_for(tmp_path), stt=ScriptedStt(["say hello world"]))
    await gateway.start()
    try:
        await run_call(gateway)
        assert gateway.telemetry.spans is not None
        spans = gateway.telemetry.spans.get_finished_spans()
    finally:
        await gateway.stop()
    by_name = {span.name: span for span in spans}
    session, turn = by_name["session"], by_name["turn"]
    assert session.parent is None
    assert session.attributes["voicegate.transport"] == "webrtc"
    assert session.attributes["voicegate.outcome"] == "caller_hangup"
    assert turn.parent is not None and turn.parent.span_id == session.context.span_id
    assert turn.attributes["voicegate.outcome"] == "answered"
    for stage in ("endpointing", "stt", "memory.refresh", "llm.first_token", "tts.first_audio"):
        child = by_name[stage]
        assert child.parent is not None and child.parent.span_id == turn.context.span_id, stage
        assert child.end_time >= child.start_time
    assert by_name["memory.read"].parent.span_id == session.context.span_id  # type: ignore[union-attr]
    assert {span.context.trace_id for span in spans} == {session.context.trace_id}


async def test_metrics_are_served_in_prometheus_text(tmp_path: Path) -> None:
    app = create_gateway_application(config_for(tmp_path), stt=ScriptedStt(["say hello world"]))
    gateway: Gateway = app.state.gateway
    async with app.router.lifespan_context(app):
        await run_call(gateway)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
            response = await http.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    lines = [line for line in response.text.splitlines() if line and not line.startswith("#")]
    bad = [line for line in lines if not PROMETHEUS_LINE.match(line)]
    assert not bad, bad
    text = response.text
    assert 'voicegate_calls_total{outcome="caller_hangup",transport="webrtc"} 1' in text
    assert re.search(r'voicegate_turn_latency_ms_bucket\{le="\+Inf",stage="first_audio"\} 1', text)
    assert re.search(r'voicegate_live_sessions\{transport="webrtc"\} 0', text)
    assert re.search(r'^voicegate_event_loop_tasks [1-9][0-9]*$', text, re.MULTILINE)  # at least the scrape's own
    assert "# TYPE voicegate_turn_latency_ms histogram" in text
    # Where callers wait: every pool's queue, and the reply's sentence waited for a synthesis worker.
    pools = {queue.pool for queue in gateway.queues}
    assert gateway.tts is not None and gateway.tts.name in pools
    for pool in pools:
        assert re.search(rf'voicegate_worker_queue\{{pool="{pool}",state="(waiting|running)"\}} 0', text), pool
    assert re.search(rf'voicegate_worker_wait_ms_count\{{pool="{gateway.tts.name}"\}} [1-9]', text)
    assert re.search(rf'voicegate_worker_service_ms_count\{{pool="{gateway.tts.name}"\}} [1-9]', text)


def test_log_lines_carry_the_trace_and_span_ids() -> None:
    config = load_config(None)
    config.telemetry.traces = "memory"
    telemetry = Telemetry(config.telemetry)
    stream = io.StringIO()
    configure_logging("info", stream=stream)
    try:
        with telemetry.tracer.start_as_current_span("turn") as span:
            logging.getLogger("test").info("inside a turn")
        logging.getLogger("test").info("outside")
    finally:
        logging.getLogger().handlers.clear()
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert inside["span_id"] == format(span.get_span_context().span_id, "016x")
    assert "trace_id" not in outside
