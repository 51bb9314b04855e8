"""The jitter buffer under scripted arrival patterns, on a simulated clock (no sleeping)."""

from __future__ import annotations

import random
from collections.abc import Iterable

import numpy as np
import pytest

from voicegate.internal.audio.jitterbuffer import JitterBuffer, PushResult
from voicegate.internal.audio.rtp import RtpPacket

TICK = 0.020


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def frame(seq: int, *, ssrc: int = 1, ts: int | None = None, label: int | None = None) -> RtpPacket:
    """A packet whose payload names it, so tests can see which frame came out."""
    name = seq if label is None else label
    timestamp = (seq * 160 if ts is None else ts) & 0xFFFFFFFF
    return RtpPacket(payload_type=0, sequence=seq & 0xFFFF, timestamp=timestamp, ssrc=ssrc,
                     payload=name.to_bytes(4, "big") * 80)  # 320 bytes: 20 ms of PCM16 at 8 kHz


def simulate(buffer: JitterBuffer, clock: FakeClock, arrivals: Iterable[tuple[float, RtpPacket]],
             ticks: int, first_tick: float = 0.005) -> list[int | None]:
    """Run pops every 20 ms and pushes at their arrival times, in time order; return what each tick played."""
    pending = sorted(arrivals, key=lambda a: a[0])
    played: list[int | None] = []
    index = 0
    for tick in range(ticks):
        tick_time = first_tick + tick * TICK
        while index < len(pending) and pending[index][0] <= tick_time:
            clock.now = pending[index][0]
            buffer.push(pending[index][1])
            assert buffer.depth <= buffer.max_depth
            index += 1
        clock.now = tick_time
        out = buffer.pop()
        assert out is None or len(out) == 320
        played.append(None if out is None else int.from_bytes(out[:4], "big"))
    return played


def steady(seqs: Iterable[int], start: float = 0.0, period: float = TICK) -> list[tuple[float, RtpPacket]]:
    return [(start + i * period, frame(seq)) for i, seq in enumerate(seqs)]


def played_frames(played: list[int | None]) -> list[int]:
    return [p for p in played if p is not None]


def new_buffer(jitter_ms: int = 40) -> tuple[JitterBuffer, FakeClock]:
    clock = FakeClock()
    return JitterBuffer(jitter_ms=jitter_ms, clock=clock), clock


def test_starts_after_the_target_depth_then_plays_every_frame_in_order() -> None:
    buffer, clock = new_buffer(jitter_ms=40)
    assert (buffer.target_depth, buffer.max_depth) == (2, 8)
    played = simulate(buffer, clock, steady(range(40)), ticks=40)
    # Frame 0 arrived 5 ms before the first tick, but playing waits for 2 frames (40 ms) buffered.
    assert played[:3] == [None, 0, 1]
    assert played_frames(played) == list(range(39))
    assert buffer.stats.missing == 0 and buffer.stats.underruns == 0


def test_a_clean_network_shrinks_the_delay_to_one_frame_by_dropping_once() -> None:
    buffer, clock = new_buffer(jitter_ms=40)
    played = played_frames(simulate(buffer, clock, steady(range(200)), ticks=200))
    assert buffer.target_depth == 1 and buffer.jitter_ms < 1
    assert buffer.stats.dropped == 1 and buffer.stats.missing == 0
    skipped = sorted(set(range(played[-1])) - set(played))
    assert len(skipped) == 1 and played == sorted(played)
    assert played[-1] == 199  # one frame of delay left: the newest frame plays at the next tick


def test_reordered_packets_play_in_sequence_order() -> None:
    buffer, clock = new_buffer()
    order = [0, 1, 3, 2, 4, 6, 5, 7, 8, 10, 9, 11, 12, 13, 14, 15]
    arrivals = [(i * TICK, frame(seq)) for i, seq in enumerate(order)]
    assert played_frames(simulate(buffer, clock, arrivals, ticks=16)) == list(range(15))
    assert buffer.stats.missing == 0 and buffer.stats.late == 0


def test_a_packet_reordered_ahead_of_the_very_first_is_still_played() -> None:
    buffer, clock = new_buffer()
    arrivals = [(0.0, frame(1)), (0.001, frame(0)), *steady(range(2, 10), start=0.02)]
    assert played_frames(simulate(buffer, clock, arrivals, ticks=10))[:3] == [0, 1, 2]


def test_duplicates_are_played_once() -> None:
    buffer, clock = new_buffer()
    assert buffer.push(frame(0)) is PushResult.ACCEPTED
    assert buffer.push(frame(0)) is PushResult.DUPLICATE
    arrivals = [*steady(range(1, 20)), (0.1, frame(4)), (0.1, frame(5))]
    assert played_frames(simulate(buffer, clock, arrivals, ticks=20)) == list(range(19))
    assert buffer.stats.duplicates == 3


def test_a_lost_packet_leaves_one_gap_and_no_extra_delay() -> None:
    buffer, clock = new_buffer()
    arrivals = [a for a in steady(range(40)) if a[1].sequence != 10]
    played = simulate(buffer, clock, arrivals, ticks=40)
    nine = played.index(9)
    assert played[nine : nine + 3] == [9, None, 11]
    assert played_frames(played) == [s for s in range(39) if s != 10]
    assert buffer.stats.missing == 1 and buffer.stats.underruns == 0


def test_a_packet_arriving_after_its_slot_is_late_and_dropped() -> None:
    buffer, clock = new_buffer()
    arrivals = [a for a in steady(range(40)) if a[1].sequence != 10] + [(0.4, frame(10))]
    played = simulate(buffer, clock, arrivals, ticks=40)
    assert 10 not in played and buffer.stats.late == 1
    buffer.push(frame(10))  # its slot passed long ago
    assert buffer.stats.late == 2


def test_a_burst_after_a_stall_is_trimmed_so_delay_does_not_accumulate() -> None:
    buffer, clock = new_buffer(jitter_ms=40)
    # Frames 20-39 were held up for 400 ms by the network and arrive together.
    arrivals = steady(range(20)) + [(0.8, frame(s)) for s in range(20, 40)] + steady(range(40, 100), start=0.8)
    played = simulate(buffer, clock, arrivals, ticks=100)
    assert buffer.stats.dropped > 0
    # After the burst the delay is back near the target: the last frames play within a few ticks.
    assert played[-1] is not None and played[-1] >= 99 - buffer.max_depth
    assert played_frames(played) == sorted(set(played_frames(played)))  # never backwards


def test_sequence_numbers_wrap_at_65535_without_a_glitch() -> None:
    buffer, clock = new_buffer()
    seqs = [65530 + i for i in range(30)]
    arrivals = [(i * TICK, frame(s, label=s)) for i, s in enumerate(seqs)]
    played = played_frames(simulate(buffer, clock, arrivals, ticks=30))
    assert played == seqs[: len(played)] and len(played) == 29
    assert buffer.stats.missing == 0 and buffer.stats.late == 0


def test_a_new_ssrc_resets_the_buffer_and_plays_the_new_stream() -> None:
    buffer, clock = new_buffer()
    old = steady(range(20))
    new = [(0.4 + i * TICK, frame(5000 + i, ssrc=2, label=1000 + i)) for i in range(20)]
    played = played_frames(simulate(buffer, clock, old + new, ticks=40))
    assert played[:18] == list(range(18))
    assert played[-1] >= 1015 and buffer.stats.resets == 1 and buffer.stats.late == 0
    assert buffer.push(frame(0, ssrc=3)) is PushResult.RESET


def test_a_sender_that_restarts_its_sequence_is_followed_after_two_packets() -> None:
    buffer, clock = new_buffer()
    simulate(buffer, clock, steady(range(30000, 30020)), ticks=20)
    assert buffer.push(frame(100)) is PushResult.LATE  # one stray packet changes nothing
    assert buffer.push(frame(101)) is PushResult.RESET
    assert buffer.push(frame(102)) is PushResult.ACCEPTED


def test_silence_suppression_pause_resumes_without_late_packets() -> None:
    buffer, clock = new_buffer()
    # Talkspurt of 20 frames, one second without packets, then the sequence continues (timestamps jump).
    talk = steady(range(20))
    resumed = [(1.4 + i * TICK, frame(20 + i, ts=(70 + i) * 160)) for i in range(20)]
    played = played_frames(simulate(buffer, clock, talk + resumed, ticks=90))
    assert played == list(range(40))
    assert buffer.stats.late == 0 and buffer.stats.missing == 0 and buffer.stats.underruns == 1


def test_target_grows_with_network_jitter_and_shrinks_when_it_calms_down() -> None:
    buffer, clock = new_buffer(jitter_ms=40)
    rng = random.Random(7)
    jittery = [(i * TICK + rng.uniform(0, 0.08), frame(i)) for i in range(500)]
    played = simulate(buffer, clock, jittery, ticks=500)
    assert buffer.target_depth > 2 and buffer.jitter_ms > 10
    assert len(played_frames(played)) > 400  # a deeper buffer keeps most frames despite 80 ms jitter
    calm = [(10.0 + i * TICK, frame(500 + i)) for i in range(500)]
    simulate(buffer, clock, calm, ticks=500, first_tick=10.005)
    assert buffer.target_depth == 1 and buffer.jitter_ms < 1
    assert buffer.depth <= 2  # the extra delay from the jittery period was dropped


def test_a_fast_sender_clock_is_absorbed_by_dropping_frames() -> None:
    buffer, clock = new_buffer(jitter_ms=40)
    # The sender's 20 ms is our 19.9 ms (0.5% fast): 15 extra frames a minute.
    arrivals = steady(range(3015), period=0.0199)
    played = simulate(buffer, clock, arrivals, ticks=3000)
    assert 5 <= buffer.stats.dropped <= 20
    assert buffer.depth <= buffer.target_depth + 1
    assert buffer.stats.underruns == 0 and buffer.stats.late == 0
    assert len(played_frames(played)) >= 2990


def test_a_slow_sender_clock_causes_rare_underruns_but_no_lost_frames() -> None:
    buffer, clock = new_buffer(jitter_ms=40)
    arrivals = steady(range(2985), period=0.0201)
    played = simulate(buffer, clock, arrivals, ticks=3000)
    frames = played_frames(played)
    # In order, and nothing skipped but the one frame the clean network's shrink dropped early on.
    assert frames == sorted(frames) and buffer.stats.dropped <= 1
    assert len(frames) >= 2980 and buffer.stats.late == 0 and buffer.stats.missing == 0
    assert 1 <= buffer.stats.underruns <= 20


def counting_packets(ms: int, count: int) -> list[tuple[float, RtpPacket]]:
    """Packets of `ms` each whose samples count up, so the played audio can be checked sample by sample."""
    samples = 8 * ms
    payloads = [np.arange(i * samples, (i + 1) * samples, dtype="<i2").tobytes() for i in range(count)]
    return [(i * ms / 1000, RtpPacket(0, i, i * samples, 1, payloads[i])) for i in range(count)]


def played_audio(buffer: JitterBuffer, clock: FakeClock, arrivals: list[tuple[float, RtpPacket]],
                 ticks: int) -> np.ndarray:
    """Everything played from the first frame on, missing frames as silence (what the caller conceals)."""
    pending = sorted(arrivals, key=lambda a: a[0])
    out: list[bytes] = []
    index = 0
    for tick in range(ticks):
        now = 0.005 + tick * TICK
        while index < len(pending) and pending[index][0] <= now:
            clock.now = pending[index][0]
            buffer.push(pending[index][1])
            index += 1
        clock.now = now
        frame = buffer.pop()
        assert frame is None or len(frame) == 320
        if frame is not None or out:
            out.append(frame if frame is not None else bytes(320))
    return np.frombuffer(b"".join(out), dtype="<i2")


@pytest.mark.parametrize("packet_ms", [10, 30, 40])
def test_packets_longer_or_shorter_than_20_ms_play_out_as_continuous_20_ms_frames(packet_ms: int) -> None:
    buffer, clock = new_buffer(jitter_ms=40)
    count = 3000 // packet_ms
    audio = played_audio(buffer, clock, counting_packets(packet_ms, count), ticks=150)
    assert audio.size >= 8 * 2700  # nearly all of the 3 s, in 20 ms frames
    # Every sample in order; the only jumps are whole packets the clean network let the buffer drop.
    steps = np.diff(audio.astype(np.int64))
    jumps = steps[steps != 1]
    assert audio[0] == 0 and len(jumps) == buffer.stats.dropped <= 3
    assert ((jumps - 1) % (8 * packet_ms) == 0).all()
    assert buffer.stats.missing == 0 and buffer.stats.underruns == 0
    assert buffer.target_depth == 1  # down from 40 ms once the estimate saw no jitter


def test_a_lost_30_ms_packet_becomes_30_ms_of_silence() -> None:
    buffer, clock = new_buffer(jitter_ms=40)
    arrivals = [a for a in counting_packets(30, 100) if a[1].sequence != 20]
    audio = played_audio(buffer, clock, arrivals, ticks=140)
    expected = np.arange(audio.size, dtype=np.int64)
    expected[20 * 240 : 21 * 240] = 0
    assert (audio == expected.astype("<i2")).all()
    assert buffer.stats.missing == 1
