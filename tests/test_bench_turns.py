"""bench/turns/turn_taking.py and bench/turns/voice_to_voice.py's pure parts: eot-bench's four numbers on small
synthetic curves, the short turns and their per-kind table, and the WebRTC caller's wire timing. The benchmarks
themselves are run by hand (docs/performance.md)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from bench.turns.sweep import (
    CurvePoint,
    TradeOff,
    cutoffs_within,
    eot_bench,
    eot_bench_cells,
    release_within,
    trade_offs,
)
from bench.turns.turn_taking import pipeline_eot, sweep_settings
from bench.turns.voice_to_voice import (
    QUESTIONS,
    SHORT_TURNS,
    SPEECH_DBFS,
    TurnWait,
    all_turns,
    bot_stages,
    by_kind,
    call_plan,
    channel_log,
    kind_rows,
    measure,
)
from bench.turns.voice_to_voice_webrtc import WireClock, first_loud_after
from voicegate.internal.evals.wire import Frame
from voicegate.internal.llm.base import ChatMessage, ChatRequest, ReplyDelta, Turn
from voicegate.internal.llm.local import LocalAgent

# A policy's curve: faster releases buy more false cut-offs.
CURVE = [TradeOff(250, 40.0), TradeOff(290, 22.0), TradeOff(450, 12.0), TradeOff(580, 8.0), TradeOff(700, 4.5),
         TradeOff(1100, 2.0), TradeOff(2000, 0.0)]


def test_cutoffs_at_a_release_are_the_fewest_of_any_setting_that_fast() -> None:
    assert cutoffs_within(CURVE, 300) == 22.0
    assert cutoffs_within(CURVE, 600) == 8.0
    assert cutoffs_within(CURVE, 200) is None  # no setting releases that fast


def test_release_at_a_cutoff_rate_is_the_fastest_setting_within_it() -> None:
    assert release_within(CURVE, 5.0) == 700
    assert release_within(CURVE, 10.0) == 580
    assert release_within([TradeOff(300, 30.0)], 5.0) is None  # every setting cuts off more


def test_eot_bench_gives_its_four_numbers_and_the_table_cells() -> None:
    numbers = eot_bench(CURVE)
    assert numbers == {"cutoff_pct_at_300ms": 22.0, "cutoff_pct_at_600ms": 8.0, "release_ms_at_5pct": 700,
                       "release_ms_at_10pct": 580}
    assert eot_bench_cells(numbers) == ["22.0 %", "8.0 %", "700 ms", "580 ms"]
    assert eot_bench_cells(eot_bench([TradeOff(900, 30.0)])) == ["-", "-", "-", "-"]


def test_a_setting_that_released_no_finished_turn_is_no_point_of_the_curve() -> None:
    assert eot_bench([TradeOff(math.nan, 0.0)]) == {"cutoff_pct_at_300ms": None, "cutoff_pct_at_600ms": None,
                                                    "release_ms_at_5pct": None, "release_ms_at_10pct": None}


def test_the_curve_is_read_with_the_premature_rate_asked_for() -> None:
    point = CurvePoint(0.5, 2000, premature_pct=12.0, heard_pct=3.0, absorbed_pct=9.0, complete_split_pct=0.0,
                       release_p50_ms=420.0, release_p95_ms=900.0)
    assert release_within(trade_offs([point], lambda p: p.premature_pct), 5.0) is None
    assert release_within(trade_offs([point], lambda p: p.heard_pct), 5.0) == 420


def test_pipeline_runs_are_the_points_of_the_pipeline_curve() -> None:
    runs = [{"released_ms": {"p50": 380, "p95": 2100}, "premature_release_pct": 14.0, "premature_heard_pct": 4.0},
            {"released_ms": {"p50": 820, "p95": 2200}, "premature_release_pct": 3.0, "premature_heard_pct": 0.0}]
    eot = pipeline_eot(runs)
    assert eot["points"] == 2
    assert eot["eot_bench"] == {"cutoff_pct_at_300ms": None, "cutoff_pct_at_600ms": 14.0,
                                "release_ms_at_5pct": 820, "release_ms_at_10pct": 820}
    assert eot["eot_bench_heard"]["release_ms_at_5pct"] == 380


def test_a_sweep_runs_every_combination_of_checked_settings() -> None:
    assert sweep_settings([]) == [{}]
    runs = sweep_settings(["pipeline.max_turn_wait_ms=800,2000", "pipeline.vad_offset_ms=120,200"])
    assert len(runs) == 4 and {"max_turn_wait_ms": 800, "vad_offset_ms": 200} in runs
    with pytest.raises(SystemExit):
        sweep_settings(["max_turn_wait_ms=800"])  # not a pipeline key


# ---- voice_to_voice: the turns -------------------------------------------------------------------


def test_there_are_at_least_thirty_short_finished_turns_of_five_kinds_beside_the_questions() -> None:
    short = [t for t in all_turns() if t.kind != "question"]
    assert len(short) >= 30
    assert len({t.kind for t in short}) >= 5
    assert [t.text for t in all_turns() if t.kind == "question"] == QUESTIONS
    assert len({t.text for t in all_turns()}) == len(all_turns())  # none twice


def test_the_kinds_are_interleaved_so_a_short_run_hears_every_kind() -> None:
    first = all_turns()[:len(SHORT_TURNS) + 1]
    assert {t.kind for t in first} == {"question", *SHORT_TURNS}
    plan = call_plan(6, 2)
    assert [len(call) for call in plan] == [3, 3]
    assert len({t.kind for call in plan for t in call}) == 6
    assert sum(len(call) for call in call_plan(0, 3)) == len(all_turns())  # 0: every turn once
    assert [t.text for call in call_plan(0, 3, ["question"]) for t in call] == QUESTIONS  # the runs before


@pytest.mark.parametrize("turn", [t for t in all_turns() if t.kind != "question"], ids=lambda t: t.text)
def test_the_local_agent_answers_each_short_turn_briefly_and_keeps_the_call(turn: object) -> None:
    text = turn.text  # type: ignore[attr-defined]

    async def answer() -> list[object]:
        request = ChatRequest("bench", None, "", [ChatMessage("user", text)], Turn(text))
        return [step async for step in LocalAgent().stream(request)]

    steps = asyncio.run(answer())
    assert steps and all(isinstance(step, ReplyDelta) for step in steps)  # no tool call: no end_call
    reply = "".join(step.text for step in steps)  # type: ignore[attr-defined]
    assert len(reply.split()) <= 16 and "offline assistant" not in reply, reply


def wait(kind: str, ms: float | None, over: bool = False) -> TurnWait:
    return TurnWait("?", 0.0, ms, 0.0, over, kind=kind)


def test_p50_and_p95_per_kind_count_only_clean_answered_turns() -> None:
    turns = [wait("greeting", v) for v in (300, 400, 2100, 350)] + [wait("greeting", None),
                                                                     wait("greeting", 50, over=True)]
    turns += [wait("thanks", 500)]
    table = by_kind(turns)
    assert table["greeting"] == {"p50": 350, "p95": 2100, "n": 4, "asked": 6}
    assert table["thanks"] == {"p50": 500, "p95": 500, "n": 1, "asked": 1}
    other = {"thanks": {"p50": 900, "p95": 1000, "n": 1, "asked": 1}}
    results: list[dict[str, Any]] = [{"by_kind": table}, {"by_kind": other}]
    assert kind_rows(results) == [["greeting", "350 / 2100 (4/6)", "-"],
                                  ["thanks", "500 / 500 (1/1)", "900 / 1000 (1/1)"]]


def test_measure_tags_each_turn_with_its_kind() -> None:
    caller = [(1.0, -20.0), (1.5, -20.0), (10.0, -20.0)]
    reply = [(2.0, -20.0), (11.0, -20.0)]
    turns = measure(caller, reply, ["Hello.", "Thanks."], ["greeting", "thanks"])
    assert [(t.kind, round(t.wait_ms or 0)) for t in turns] == [("greeting", 500), ("thanks", 1000)]


# ---- voice_to_voice over WebRTC: wire timing -------------------------------------------------------


def test_a_decoded_frame_takes_the_arrival_of_the_packet_that_carried_it() -> None:
    clock = WireClock()
    for n in range(5):
        clock.packet(960 * n, 10.0 + 0.02 * n)
    clock.packet(960, 99.0)  # a retransmitted duplicate keeps the first arrival
    # The jitter buffer hands frames over later (here all at 12.0): their wire time is the packet's.
    assert clock.arrival(960, 12.0) == pytest.approx(10.02)
    assert clock.arrival(2880, 12.0) == pytest.approx(10.06)  # 1920 was lost to the decoder: dropped
    assert clock.arrival(123, 12.0) == pytest.approx(10.08)  # a timestamp never seen: the oldest arrival left
    assert clock.arrival(None, 12.0) == 12.0  # nothing left: the decode time
    assert (clock.matched, clock.guessed) == (2, 2)


def test_the_receiver_s_renumbering_of_decoded_frames_is_undone() -> None:
    clock = WireClock()
    origin = 944569377  # aiortc numbers decoded frames from the first one: pts = RTP timestamp - origin
    for n in range(3):
        clock.packet(origin + 960 * n, 20.0 + 0.02 * n)
        clock.rebased(960 * n, origin + 960 * n)
    assert clock.arrival(960, 25.0) == pytest.approx(20.02)
    assert clock.arrival(1920, 25.0) == pytest.approx(20.04)
    assert (clock.matched, clock.guessed) == (2, 0)


def test_the_first_loud_reply_frame_is_read_by_wire_time_not_by_decode_order() -> None:
    quiet, loud = bytes(640), (b"\x00\x40" * 320)
    frames = [Frame(5.10, loud, -8.0), Frame(5.00, quiet, -120.0), Frame(5.04, loud, -8.0), Frame(4.0, loud, -8.0)]
    assert -8.0 > SPEECH_DBFS
    found = first_loud_after(frames, 4.5)
    assert found is not None and found.at == 5.04
    assert first_loud_after(frames, 4.5, before=5.02) is None


def test_a_webrtc_call_s_datachannel_events_give_its_stages_and_transcript() -> None:
    events = [{"type": "timing", "stage": "stt", "ms": 120.0, "turn": 1},
              {"type": "timing", "stage": "stt", "ms": 999.0, "turn": 1},  # the first of a stage counts
              {"type": "transcript", "role": "user", "text": "What time", "final": True},
              {"type": "transcript", "role": "user", "text": "What time is it?", "final": True, "replaces": True},
              {"type": "transcript", "role": "agent", "text": "It's noon.", "final": True},
              {"type": "transcript", "role": "user", "text": "partial", "final": False}]
    stages, said = channel_log(events)
    assert stages == {1: {"stt": 120.0}}
    assert said == [["user", "What time is it?"], ["agent", "It's noon."]]


def test_pipecat_s_events_are_timed_from_the_caller_s_last_speech_of_each_turn() -> None:
    turns = [TurnWait("Hello.", 10.0, 500.0, 0.0, False), TurnWait("Thanks.", 20.0, 500.0, 0.0, False)]
    events = [{"event": "vad_stopped", "t": 10.2}, {"event": "transcript", "t": 10.45, "text": "Hello."},
              {"event": "user_turn_ended", "t": 10.48}, {"event": "turn_released", "t": 10.5},
              {"event": "bot_started", "t": 10.9}, {"event": "turn_released", "t": 20.4}]
    stages = bot_stages(turns, events, gap_s=4.0)
    assert stages[1] == pytest.approx({"pipecat_vad_stop": 200, "pipecat_transcript": 450, "pipecat_turn_end": 480,
                                       "pipecat_released": 500, "pipecat_bot_speaking": 900})
    assert stages[2] == pytest.approx({"pipecat_released": 400})
