"""bench/capacity/conversations.py's pure parts: the callers' scripts, /metrics read as the node renders it, packet loss
on the wire, and a step's verdict. The benchmark itself is run by hand (it takes minutes)."""

from __future__ import annotations

import math
import struct

import pytest

from bench.capacity.node_metrics import Scrape, bottleneck, parse_prometheus, where_callers_wait
from bench.capacity.plan import (
    Criteria,
    StepFigures,
    load_verdict,
    sequence_loss,
    share_out,
    silence_plan,
    verdict,
)
from bench.common.wire_tap import Heard
from bench.turns.voice_to_voice import LEAD_S
from voicegate.internal.config.providers import TelemetryConfig
from voicegate.internal.telemetry.otel import Telemetry
from voicegate.internal.telemetry.queues import WorkQueue


def test_the_silences_bring_speech_to_the_talk_share_over_the_whole_call() -> None:
    clips = [1.2, 2.8, 1.5, 0.9, 2.0, 1.7] * 4
    gaps = silence_plan(clips, seconds=60, talk=0.3, min_gap_s=4.0)
    speech = sum(clips[:len(gaps)])
    assert LEAD_S + speech + sum(gaps) == pytest.approx(60)
    assert speech / 60 == pytest.approx(0.3, abs=0.03)
    assert min(gaps) >= 4.0


def test_no_silence_is_shorter_than_the_floor_even_when_the_share_asks_for_more_talk() -> None:
    clips = [1.0] * 30
    gaps = silence_plan(clips, seconds=30, talk=0.6, min_gap_s=4.0)
    assert len(gaps) == 5 and min(gaps) >= 4.0  # 1 s + 5 x (1 s + 4 s) + what is left: talk 0.17, not 0.6
    assert LEAD_S + len(gaps) + sum(gaps) == pytest.approx(30)


def test_a_longer_question_is_followed_by_a_longer_silence() -> None:
    assert share_out([1.0, 3.0], 20.0, floor=4.0) == pytest.approx([5.0, 15.0])
    assert share_out([1.0, 9.0], 20.0, floor=4.0) == pytest.approx([4.0, 16.0])  # the floor, the rest to the other


def test_a_call_too_short_for_a_question_and_its_reply_has_no_script() -> None:
    assert silence_plan([3.0], seconds=6, talk=0.3, min_gap_s=4.0) == []


def test_the_parser_reads_what_the_node_renders_and_names_the_queue_callers_wait_in() -> None:
    telemetry = Telemetry(TelemetryConfig())
    whisper, piper = WorkQueue("whisper"), WorkQueue("piper")
    telemetry.watch_worker_queues([whisper, piper])
    before = Scrape(0.0, parse_prometheus(telemetry.prometheus()))
    telemetry.worker_wait("whisper", 30.0)
    telemetry.worker_wait("piper", 200.0)
    telemetry.worker_wait("piper", 400.0)
    telemetry.worker_service("piper", 150.0)
    telemetry.stage("end_of_turn", 900.0)
    telemetry.stage("stt", 300.0)
    for _ in range(3):
        whisper.enter()
    during = Scrape(1.0, parse_prometheus(telemetry.prometheus()))
    after = Scrape(2.0, parse_prometheus(telemetry.prometheus()))

    figures = where_callers_wait(before, after, [during])

    assert figures.pool_wait_ms == {"whisper": 30.0, "piper": 300.0}
    assert figures.pool_waits == {"whisper": 1, "piper": 2}
    assert figures.pool_service_ms == {"piper": 150.0}
    assert figures.pool_max_waiting == {"whisper": 3.0, "piper": 0.0}
    assert figures.stage_ms == {"end_of_turn": 900.0, "stt": 300.0}
    assert figures.bottleneck == "piper queue 300 ms"


def test_the_parser_takes_escaped_labels_infinity_and_skips_what_is_not_a_sample() -> None:
    text = "\n".join([
        "# HELP voicegate_worker_wait_ms Time an utterance waited",
        "# TYPE voicegate_worker_wait_ms histogram",
        'voicegate_worker_wait_ms_bucket{le="+Inf",pool="whisper"} 4',
        'voicegate_sip_registration_up{registrar="a \\"b\\" c",username="x\\\\y"} 1',
        "voicegate_event_loop_tasks 8 1700000000000",
        "not a sample line",
    ])
    samples = parse_prometheus(text)
    assert samples == {
        ("voicegate_worker_wait_ms_bucket", (("le", "+Inf"), ("pool", "whisper"))): 4.0,
        ("voicegate_sip_registration_up", (("registrar", 'a "b" c'), ("username", "x\\y"))): 1.0,
        ("voicegate_event_loop_tasks", ()): 8.0,
    }


def test_a_node_without_worker_metrics_gives_empty_figures_and_the_slowest_stage() -> None:
    assert where_callers_wait(None, None, []).bottleneck == "-"
    stages = 'voicegate_turn_latency_ms_sum{stage="stt"} 600\nvoicegate_turn_latency_ms_count{stage="stt"} 2\n'
    figures = where_callers_wait(Scrape(0, {}), Scrape(1, parse_prometheus(stages)), [])
    assert figures.pool_wait_ms == {} and figures.rtp_lost is None
    assert figures.bottleneck == "stt 300 ms"
    assert bottleneck({"whisper": 80.0}, {"end_of_turn": 1200.0}) == "end_of_turn 1200 ms"  # short waits: no queue


def rtp(sequence: int, ssrc: int = 7) -> Heard:
    return Heard(0.0, struct.pack("!BBHII", 0x80, 0, sequence, 160 * sequence % 2**32, ssrc) + b"\xff" * 160)


def test_loss_is_counted_from_sequence_gaps_per_source_across_the_wrap() -> None:
    packets = [rtp(65533), rtp(65534), rtp(1), rtp(2), rtp(10, ssrc=8), rtp(12, ssrc=8)]
    assert sequence_loss(packets) == (2 + 1, 6 + 3)  # 65535 and 0 missing; 11 of the second source


def figures(**changes: object) -> StepFigures:
    passing: dict[str, object] = dict(calls=4, asked=20, answered=20, clean=19, talked_over=1, wait_p50_ms=800.0,
                                      wait_p95_ms=1400.0, wait_max_ms=1600.0, word_error_pct=4.0, failed=0)
    return StepFigures(**{**passing, **changes})  # type: ignore[arg-type]


def test_a_step_passes_only_fast_right_complete_and_without_failures() -> None:
    assert verdict(figures(), Criteria()) == []
    assert verdict(figures(wait_p95_ms=1600.0), Criteria()) == ["wait p95 1600 ms > 1500 ms"]
    assert verdict(figures(answered=19), Criteria()) == ["1 of 20 questions unanswered"]
    assert verdict(figures(word_error_pct=12.5), Criteria()) == ["word errors 12.5 % > 10 %"]
    assert verdict(figures(failed=1), Criteria()) == ["1 failed call(s)"]


def test_a_step_with_no_clean_turn_or_nothing_heard_fails() -> None:
    reasons = verdict(figures(clean=0, wait_p95_ms=math.nan, word_error_pct=math.nan), Criteria())
    assert reasons == ["word errors nan % > 10 %", "wait p95 nan ms > 1500 ms"]


def test_against_the_reference_a_step_fails_only_on_what_the_load_added() -> None:
    reference = figures(wait_p50_ms=450.0, wait_p95_ms=2200.0)  # the turn policy's own holds: over 1.5 s
    assert load_verdict(figures(wait_p50_ms=700.0, wait_p95_ms=2450.0), reference, Criteria()) == []
    assert load_verdict(figures(wait_p50_ms=800.0, wait_p95_ms=2450.0), reference, Criteria()) == [
        "p50 800 ms > reference 450 + 300 ms"]
    assert load_verdict(figures(wait_p50_ms=500.0, wait_p95_ms=2600.0, answered=18), reference, Criteria()) == [
        "2 of 20 questions unanswered", "p95 2600 ms > reference 2200 + 300 ms"]


def test_a_late_event_loop_is_named_before_any_queue_and_its_lateness_is_read_from_the_scrapes() -> None:
    before = parse_prometheus("voicegate_event_loop_lag_ms_sum 100\nvoicegate_event_loop_lag_ms_count 10\n"
                              "voicegate_event_loop_lag_sustained_ms 2\n")
    during = parse_prometheus("voicegate_event_loop_lag_sustained_ms 180\n")
    after = parse_prometheus('voicegate_event_loop_lag_ms_sum 1100\nvoicegate_event_loop_lag_ms_count 30\n'
                             'voicegate_event_loop_lag_sustained_ms 40\n'
                             'voicegate_worker_wait_ms_sum{pool="piper"} 4000\n'
                             'voicegate_worker_wait_ms_count{pool="piper"} 10\n')
    figures = where_callers_wait(Scrape(0, before), Scrape(2, after), [Scrape(1, during)])
    assert figures.loop_lag_ms == 50.0  # (1100 - 100) / (30 - 10) over the step
    assert figures.loop_lag_sustained_max_ms == 180.0
    assert figures.bottleneck == "event loop 180 ms late"  # before the piper queue's 400 ms
    assert bottleneck({"piper": 400.0}, {}, loop_lag_ms=90.0) == "piper queue 400 ms"  # under 100 ms: not named


def test_the_limiting_stage_is_the_part_of_a_reply_that_grew_most_over_the_reference() -> None:
    from bench.capacity.node_metrics import limiting_stage

    reference = {"stt": 250.0, "tts_first_audio": 130.0, "llm_first_token": 5.0, "end_of_turn": 900.0}
    loaded = {"stt": 330.0, "tts_first_audio": 540.0, "llm_first_token": 6.0, "end_of_turn": 1400.0,
              "first_audio": 560.0}
    # end_of_turn and first_audio span other stages, so they are never named; synthesis grew most.
    assert limiting_stage(loaded, reference) == "tts_first_audio 540 ms (+410)"
    assert limiting_stage(reference) == "stt 250 ms"  # the first step: the slowest part
    assert limiting_stage({"end_of_turn": 900.0}) == "-"
    assert limiting_stage({"stt": 300.0}, {}) == "stt 300 ms (+0)"  # a stage the reference never saw
