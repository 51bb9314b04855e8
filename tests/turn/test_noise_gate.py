"""The VAD on a noisy line (Silero behind the noise-aware level gate, as the pipeline builds it): steady
noise neither ends a caller's sentence between its words nor keeps the utterance open after it, where
the plain level gate cut the same sentence; voices behind the caller are heard as voices and get the
plain gate; the gate is the default and can be turned off. Each line has a second and a half of its
background before the caller speaks (a caller listening to the greeting): the gate learns the line first.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.common.noises import add_noise
from bench.turns.cases import channel, last_speech_end
from tests.speech import neural, silence
from voicegate.internal.audio.frame import frame_bytes
from voicegate.internal.config import load_config
from voicegate.internal.pipeline.services import PipelineServices
from voicegate.internal.turn.silero import SileroClassifier, shared_silero
from voicegate.internal.turn.vad import (
    AdaptiveEnergyClassifier,
    NoiseAwareGate,
    VadEvent,
    VadProfile,
    VoiceActivityDetector,
)

pytestmark = pytest.mark.slow
SENTENCE = "Could you please check whether my parcel has been sent?"
LEAD_MS = 1500


def events(pcm: bytes, rate: int, gate: AdaptiveEnergyClassifier | NoiseAwareGate) -> list[tuple[float, VadEvent]]:
    vad = VoiceActivityDetector(SileroClassifier(rate, shared_silero(), 0.5, gate=gate), VadProfile(60, 120), gate)
    size = frame_bytes(rate)
    out = []
    for index in range(0, len(pcm) - size + 1, size):
        event = vad.process(pcm[index:index + size])
        if event is not None:
            out.append(((index // size + 1) * 0.02, event))
    return out


@pytest.mark.parametrize("condition", ["white10", "street10", "pink15"])
def test_steady_noise_neither_splits_a_sentence_nor_keeps_it_open(condition: str) -> None:
    clip = neural([SENTENCE])[0]
    padded = silence(LEAD_MS, 16000) + clip + silence(2000, 16000)
    speech_end = LEAD_MS / 1000 + last_speech_end(clip, 16000)
    line = channel(add_noise(padded, condition, 3, "tuning"), 8000)
    heard = events(line, 8000, NoiseAwareGate(AdaptiveEnergyClassifier(9.0)))
    ends = [t for t, e in heard if e is VadEvent.SPEECH_END]
    assert [e for _, e in heard][:1] == [VadEvent.SPEECH_START]
    assert [t for t in ends if t < speech_end - 0.05] == [], heard  # not ended between the words
    assert ends and ends[-1] <= speech_end + 0.6, heard  # ...nor held open by the noise after them
    # The plain gate (every frame 9 dB over the floor) ended the same sentence between its words.
    plain = events(line, 8000, AdaptiveEnergyClassifier(9.0))
    assert [t for t, e in plain if e is VadEvent.SPEECH_END and t < speech_end - 0.05], plain


def test_a_clean_line_ends_the_utterance_as_soon_as_before() -> None:
    clip = neural([SENTENCE])[0]
    line = channel(silence(LEAD_MS, 16000) + clip + silence(2000, 16000), 8000)
    new = [t for t, e in events(line, 8000, NoiseAwareGate(AdaptiveEnergyClassifier(9.0))) if e is VadEvent.SPEECH_END]
    old = [t for t, e in events(line, 8000, AdaptiveEnergyClassifier(9.0)) if e is VadEvent.SPEECH_END]
    assert new[-1] <= old[-1] + 0.06


@pytest.mark.parametrize("enabled", [True, False])
def test_the_pipeline_builds_the_gate_its_config_names(enabled: bool) -> None:
    from voicegate.internal.llm.local import LocalAgent
    from voicegate.internal.stt.pocketsphinx import PocketsphinxSpeechToText
    from voicegate.internal.tts.espeak import EspeakTextToSpeech

    config = load_config(None)
    config.pipeline.end_of_turn = "off"
    config.pipeline.vad_noise_gate = enabled
    services = PipelineServices(stt=PocketsphinxSpeechToText(config.pocketsphinx),
                                tts=EspeakTextToSpeech(config.espeak), model=LocalAgent(), config=config.pipeline)
    vad = services.make_vad(8000, VadProfile(60, 120))
    assert isinstance(vad.meter, NoiseAwareGate) is enabled


def test_vad_noise_gate_must_be_a_boolean(tmp_path: Path) -> None:
    from voicegate.internal.config.loader import ConfigError

    path = tmp_path / "config.toml"
    path.write_text('[pipeline]\nvad_noise_gate = "sometimes"\n')
    with pytest.raises(ConfigError, match=r"pipeline\.vad_noise_gate"):
        load_config(path)


BABBLE = [("en-us+m3", "The weather turned cold again this afternoon and everyone stayed in."),
          ("en-gb+f2", "She said the meeting had been moved to the room upstairs."),
          ("en-us+f4", "We should have taken the earlier train home last night."),
          ("en-gb+m1", "My brother bought a new bicycle for the summer holidays.")]


def babble(samples: int) -> np.ndarray:
    """Four espeak-ng talkers of both sexes, each looping its own sentence, summed (16 kHz floats)."""
    out = np.zeros(samples)
    for offset, (voice, text) in enumerate(BABBLE):
        talker = np.frombuffer(speak_as(voice, text), dtype=np.int16).astype(np.float64)
        looped = np.tile(talker, samples // talker.size + 2)
        start = offset * talker.size // len(BABBLE)
        out += looped[start:start + samples]
    return out


def speak_as(voice: str, text: str) -> bytes:
    import subprocess

    from voicegate.internal.audio.resample import resample
    from voicegate.internal.tts.espeak import parse_wav_header

    wav = subprocess.run(["espeak-ng", "-v", voice, "--stdout", text], capture_output=True, check=True).stdout
    return resample(wav[44:], parse_wav_header(wav[:44]), 16000)


def test_voices_behind_the_caller_are_heard_as_voices_and_do_not_hold_the_turn_open() -> None:
    from bench.common.noises import active_level_db

    pcm = neural([SENTENCE])[0]
    clip = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    lead = 16000 * LEAD_MS // 1000
    caller = np.concatenate([np.zeros(lead), clip, np.zeros(16000 * 2)])
    background = babble(caller.size)
    background *= 10 ** ((active_level_db(clip) - 15.0) / 20) / np.sqrt(np.mean(background**2))
    line = channel(np.clip(np.rint(caller + background), -32768, 32767).astype(np.int16).tobytes(), 8000)
    gate = NoiseAwareGate(AdaptiveEnergyClassifier(9.0))
    events(line[: lead], 8000, gate)  # the babble alone, before the caller speaks (8 kHz: half the bytes)
    assert gate.voices_behind, gate.background_voice  # Silero hears voices in the background
    assert gate.hold_db == 9.0  # ...so the gate is the plain one: every frame 9 dB over the floor
    # ...and the caller's turn ends where their words end: the voices behind, 15 dB under the caller, neither
    # bridge the gaps nor open a new utterance once the caller has been heard (the plain gate lets them in).
    speech_end = LEAD_MS / 1000 + last_speech_end(pcm, 16000)
    noise_aware = events(line, 8000, NoiseAwareGate(AdaptiveEnergyClassifier(9.0)))
    after = [(t, e) for t, e in noise_aware if t > speech_end - 0.5]
    assert [e for _, e in after] == [VadEvent.SPEECH_END] and after[0][0] <= speech_end + 0.6, noise_aware
    plain = events(line, 8000, AdaptiveEnergyClassifier(9.0))
    assert [t for t, e in plain if e is VadEvent.SPEECH_START and t > speech_end], plain  # the babble reopens it
    white = NoiseAwareGate(AdaptiveEnergyClassifier(9.0))
    events(channel(add_noise(silence(LEAD_MS, 16000) + pcm, "white10", 1, "tuning"), 8000)[: lead], 8000, white)
    assert not white.voices_behind, white.background_voice  # steady hiss: no voices, the bridge is used


def steady(level_dbfs: float, frames: int, rate: int = 8000, gap_dbfs: float = -70.0) -> list[bytes]:
    """`frames` 20 ms frames of a tone at `level_dbfs`, every fifth one near silence (the gaps between
    syllables, which keep the line's floor where it is)."""
    from tests.speech import tone

    size = frame_bytes(rate)
    loud, quiet = tone(20, rate, level_dbfs)[:size], tone(20, rate, gap_dbfs)[:size]
    return [quiet if i % 5 == 4 else loud for i in range(frames)]


def fed(gate: NoiseAwareGate, frames: list[bytes]) -> list[bool]:
    """The gate's verdict on each tone frame (the near-silent ones left out)."""
    verdicts = [gate.is_speech(frame) for frame in frames]
    return [verdict for i, verdict in enumerate(verdicts) if i % 5 != 4]


def test_with_voices_behind_a_stretch_well_under_the_callers_level_is_not_the_caller() -> None:
    """The gate alone, on steady tones: the caller at -15 dBFS, then a stretch 20 dB under them stands over the
    floor like a voice but is turned away; the same stretch within 15 dB of the caller is let through."""
    gate = NoiseAwareGate(AdaptiveEnergyClassifier(9.0))
    fed(gate, steady(-70.0, 20))  # the line's floor
    assert gate.voices_behind  # nothing heard yet says otherwise
    assert all(fed(gate, steady(-15.0, 50))[1:])  # the caller
    behind = fed(gate, steady(-35.0, 60))
    assert not any(behind[15:]), behind  # after the bridge, the voices behind do not hold it open
    near = NoiseAwareGate(AdaptiveEnergyClassifier(9.0))
    fed(near, steady(-70.0, 20))
    fed(near, steady(-15.0, 50))
    assert all(fed(near, steady(-25.0, 60))), "a caller's quieter stretch is still the caller"


def test_a_caller_who_goes_quieter_is_heard_again_as_their_level_eases_down() -> None:
    gate = NoiseAwareGate(AdaptiveEnergyClassifier(9.0))
    fed(gate, steady(-70.0, 20))
    fed(gate, steady(-15.0, 50))
    assert not fed(gate, steady(-32.0, 30))[-1]  # 17 dB under: turned away at first
    heard = fed(gate, steady(-32.0, 600))  # 12 s: the caller's level eases 0.25 dB a second
    assert heard[-1], "never shut out for good"


def test_without_voices_behind_nothing_is_turned_away_by_level() -> None:
    gate = NoiseAwareGate(AdaptiveEnergyClassifier(9.0))
    gate.background_voice = 0.0  # the line's background has been heard: no voices in it
    fed(gate, steady(-70.0, 20))
    fed(gate, steady(-15.0, 50))
    assert all(fed(gate, steady(-35.0, 60))[15:])


def test_on_a_noisy_line_a_stretch_far_under_the_caller_is_turned_away_even_unheard_as_voices() -> None:
    """Silero does not always hear a babble of several voices as voices; on a noisy line (the floor within 35 dB
    of the caller's peak) a loud stretch 20 dB under the caller is still not the caller."""
    gate = NoiseAwareGate(AdaptiveEnergyClassifier(9.0))
    gate.background_voice = 0.0
    fed(gate, steady(-15.0, 50, gap_dbfs=-45.0))  # the line's floor 30 dB under the caller
    assert not any(fed(gate, steady(-35.0, 60, gap_dbfs=-45.0))[20:])  # past the 100 ms level and the bridge
