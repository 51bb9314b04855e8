"""The recordings of real people the turn tests and benches use (tests/human_speech.py, bench/turns/human.py)."""

from __future__ import annotations

import numpy as np

from bench.turns.human import room_tone, speech_end
from tests.human_speech import CLIPS, SOURCES, clips
from tests.speech import silence, tone


def test_every_clip_is_a_real_recording_of_a_known_source_with_its_words() -> None:
    installed = {c.name: c for c in clips()}
    assert set(installed) == {spec.name for spec in CLIPS}
    for spec in CLIPS:
        assert spec.source in SOURCES and SOURCES[spec.source].licence
        assert spec.text.strip() and spec.split in ("dev", "heldout")
        assert 0 <= spec.pause_after < len(spec.text.split())
        samples = np.frombuffer(installed[spec.name].pcm16k, dtype=np.int16)
        assert samples.size > 16000 * 0.3 and np.abs(samples).max() > 1000, spec.name  # speech, not silence


def test_the_splits_share_no_clip_and_both_hold_every_kind_a_caller_brings() -> None:
    dev = {c.name for c in clips("dev")}
    heldout = {c.name for c in clips("heldout")}
    assert dev and heldout and not dev & heldout
    for split in ("dev", "heldout"):
        kinds = {c.spec.kind for c in clips(split)}
        assert {"statement", "answer", "list", "number"} <= kinds, (split, kinds)
        assert any(c.spec.pause_after for c in clips(split))


def test_a_pause_is_filled_with_the_recordings_own_background() -> None:
    pcm = tone(500, 16000, level_dbfs=-20.0) + tone(300, 16000, level_dbfs=-60.0) + tone(500, 16000, -20.0)
    filler = np.frombuffer(room_tone(pcm, 1.0), dtype=np.int16).astype(np.float64)
    assert filler.size == 16000
    level = 10 * np.log10(np.mean(filler ** 2) / 32768 ** 2)
    assert -65 < level < -55  # the quiet stretch, not the speech and not digital silence


def test_a_persons_speech_ends_where_their_voice_does_not_where_the_room_noise_does() -> None:
    rng = np.random.default_rng(1)
    voice = tone(1000, 16000, level_dbfs=-20.0) + silence(1000, 16000)
    noisy = np.frombuffer(voice, dtype=np.int16) + rng.normal(0, 30, 32000)  # room noise at about -60 dBFS
    end = speech_end(noisy.astype(np.int16).tobytes())
    assert 0.98 <= end <= 1.02
