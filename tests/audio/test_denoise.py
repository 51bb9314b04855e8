"""RNNoise on a call's frames: a neural voice in white noise at 10 dB SNR, fed 20 ms at a time as a call would.

Measured on these clips (Piper voice, several noise seeds, and espeak-ng for comparison): the noise before
the speech drops by 41-60 dB, the noise after it by 73-93 dB, speech keeps 89-95 % of its energy, and the
speech frames' own SNR rises from 10 dB to 11-14 dB. The bounds below leave a wide margin under those.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pytest

from tests.conftest import REPO
from tests.speech import neural, neural_telephone, tone
from voicegate.internal.audio.denoise import DELAY_MS, RnnoiseDenoiser, rnnoise_available
from voicegate.internal.audio.frame import frame_bytes

TEXT = "I would like to check the balance on my account please."
SNR_DB = 10.0
SPEECH_FLOOR = 32768.0**2 * 1e-4  # a frame of the clean clip louder than -40 dBFS is speech

_Signal = npt.NDArray[np.float64]


@dataclass(frozen=True)
class NoisyCall:
    rate: int
    clean: _Signal  # the sentence with 1 s of silence either side
    noisy: bytes  # the same in white noise, as PCM16
    speech: npt.NDArray[np.bool_]  # which of its 20 ms frames are speech


def frames(signal: _Signal, rate: int) -> _Signal:
    return signal.reshape(-1, rate // 50)


def noisy_call(rate: int, seed: int = 0) -> NoisyCall:
    """The sentence in the middle of 1 s of silence either side, in noise SNR_DB under the speech's level."""
    speech = neural_telephone(TEXT) if rate == 8000 else neural([TEXT], rate)[0]
    clean = np.concatenate([np.zeros(rate), np.frombuffer(speech, dtype=np.int16), np.zeros(rate)])
    clean = clean[: len(clean) // (rate // 50) * (rate // 50)]
    energy = (frames(clean, rate) ** 2).mean(axis=1)
    level = float(energy[energy > SPEECH_FLOOR].mean())
    noise = np.random.default_rng(seed).standard_normal(len(clean)) * math.sqrt(level / 10 ** (SNR_DB / 10))
    noisy = np.clip(np.rint(clean + noise), -32768, 32767).astype(np.int16).tobytes()
    return NoisyCall(rate, clean, noisy, energy > SPEECH_FLOOR)


@pytest.fixture(scope="module", params=[8000, 16000], ids=["8k", "16k"])
def call(request: pytest.FixtureRequest) -> NoisyCall:
    return noisy_call(request.param)


def samples(pcm: bytes) -> _Signal:
    return np.frombuffer(pcm, dtype=np.int16).astype(np.float64)


def frames_of(pcm: bytes, rate: int) -> Iterator[bytes]:
    size = frame_bytes(rate)
    return (pcm[i : i + size] for i in range(0, len(pcm), size))


def denoise(denoiser: RnnoiseDenoiser, pcm: bytes) -> bytes:
    out = []
    for frame in frames_of(pcm, denoiser.sample_rate):
        denoised = denoiser.process(frame)
        assert len(denoised) == len(frame)
        out.append(denoised)
    return b"".join(out)


def undelayed(pcm: bytes, rate: int) -> _Signal:
    """The output moved back by DELAY_MS, so its frames line up with the input's."""
    delay = DELAY_MS * rate // 1000
    return np.concatenate([samples(pcm)[delay:], np.zeros(delay)])


def db(ratio: float) -> float:
    return 10 * math.log10(ratio)


def test_rnnoise_is_usable_with_the_test_extra() -> None:
    assert rnnoise_available() is None


def test_noise_without_speech_drops_by_30_db(call: NoisyCall) -> None:
    noisy = frames(samples(call.noisy), call.rate)
    out = frames(undelayed(denoise(RnnoiseDenoiser(call.rate), call.noisy), call.rate), call.rate)
    last_speech = int(np.flatnonzero(call.speech)[-1])
    # RNNoise needs a few hundred ms to learn the noise; the 300 ms after the speech are its decay.
    for stretch in (slice(15, 48), slice(last_speech + 15, len(noisy) - 2)):
        power_in = float((noisy[stretch] ** 2).mean())
        power_out = max(float((out[stretch] ** 2).mean()), 1e-6)
        assert db(power_in / power_out) > 30


def test_speech_keeps_most_of_its_energy_and_comes_out_cleaner(call: NoisyCall) -> None:
    clean = frames(call.clean, call.rate)[call.speech]
    noisy = frames(samples(call.noisy), call.rate)[call.speech]
    out = frames(undelayed(denoise(RnnoiseDenoiser(call.rate), call.noisy), call.rate), call.rate)[call.speech]
    assert (out**2).sum() / (clean**2).sum() > 0.7
    assert ((out - clean) ** 2).sum() < ((noisy - clean) ** 2).sum()


def test_output_is_the_input_delayed_by_delay_ms(call: NoisyCall) -> None:
    out = samples(denoise(RnnoiseDenoiser(call.rate), call.clean.astype(np.int16).tobytes()))
    lags = range(0, 50 * call.rate // 1000)
    best = max(lags, key=lambda lag: float(np.dot(call.clean[: len(out) - lag], out[lag:])))
    assert abs(best - DELAY_MS * call.rate // 1000) <= 1


@pytest.mark.parametrize("rate", [8000, 16000])
def test_no_point_of_the_frame_clicks(rate: int) -> None:
    # A filter that lost its history at a frame edge would leave a click at the same point of every frame
    # (the input's edge, shifted by the delay, or the output's). A steady tone's high-frequency residue
    # (third difference) is then far above its median at that point; without one it is the same everywhere.
    frame = rate // 50
    out = samples(denoise(RnnoiseDenoiser(rate), tone(3000, rate, level_dbfs=-20, hz=220)))[rate // 2 :]
    assert np.sqrt((out**2).mean()) > 300  # RNNoise lets this tone through (it silences a 1 kHz one)
    residue = np.diff(out, 3) ** 2
    by_point = residue[: len(residue) // frame * frame].reshape(-1, frame).mean(axis=0)
    assert by_point.max() / np.median(by_point) < 4


def test_calls_denoised_side_by_side_do_not_share_state() -> None:
    mine, other, wideband = noisy_call(8000, seed=1), noisy_call(8000, seed=2), noisy_call(16000, seed=3)
    alone = denoise(RnnoiseDenoiser(8000), mine.noisy)
    denoisers = [RnnoiseDenoiser(8000), RnnoiseDenoiser(8000), RnnoiseDenoiser(16000)]
    streams = [frames_of(mine.noisy, 8000), frames_of(other.noisy, 8000), frames_of(wideband.noisy, 16000)]
    mine_out = []
    for step in zip(*streams, strict=True):
        outs = [denoiser.process(frame) for denoiser, frame in zip(denoisers, step, strict=True)]
        mine_out.append(outs[0])
    assert b"".join(mine_out) == alone


@pytest.mark.parametrize("rate", [8000, 16000])
def test_silence_in_is_silence_out(rate: int) -> None:
    out = samples(denoise(RnnoiseDenoiser(rate), bytes(frame_bytes(rate) * 100)))
    assert np.abs(out).max() <= 1


@pytest.mark.parametrize("rate, size", [(8000, 160), (8000, 640), (16000, 320), (16000, 0), (16000, 642)])
def test_a_frame_of_the_wrong_size_is_refused(rate: int, size: int) -> None:
    with pytest.raises(ValueError, match=f"20 ms frames of {frame_bytes(rate)} bytes, got {size}"):
        RnnoiseDenoiser(rate).process(bytes(size))


def test_an_unsupported_rate_is_refused() -> None:
    with pytest.raises(ValueError, match="8000 or 16000 Hz, not 48000 Hz"):
        RnnoiseDenoiser(48000)


def run_python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                          timeout=120).stdout.strip()


def test_denoising_loads_only_the_library_not_pyrnnoise_and_its_file_tools() -> None:
    loaded = run_python(
        "import sys\n"
        "from voicegate.internal.audio.denoise import RnnoiseDenoiser\n"
        "RnnoiseDenoiser(8000).process(bytes(320))\n"
        "print(sorted({'pyrnnoise', 'audiolab', 'matplotlib'} & set(sys.modules)))\n"
    )
    assert loaded == "[]"


def test_without_pyrnnoise_the_module_imports_and_says_why() -> None:
    # A None entry in sys.modules is how Python itself marks a module as not importable.
    reason = run_python(
        "import sys\n"
        "sys.modules['pyrnnoise'] = None\n"
        "from voicegate.internal.audio.denoise import RnnoiseDenoiser, RnnoiseUnavailable, rnnoise_available\n"
        "try:\n"
        "    RnnoiseDenoiser(8000)\n"
        "except RnnoiseUnavailable as exc:\n"
        "    assert str(exc) == rnnoise_available()\n"
        "    print(exc)\n"
    )
    assert reason == "pyrnnoise is not installed (pip install 'voicegate[denoise]')"
