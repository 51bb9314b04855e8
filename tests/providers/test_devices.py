"""Which device each local engine runs on: the policy with given machines, then this machine for real.

The policy is pure, so any machine can be described to it (no GPU, one, two; onnxruntime with or without
its CUDA provider). What this machine really offers is then asked of the real libraries; the tests that
need a machine without CUDA say so and skip on one that has it. Whisper's real decodes, on the CPU and on
CUDA, are in test_whisper_stt.py beside its other decodes (they share its loaded engine).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli
from voicegate.internal.config import Config, ConfigError
from voicegate.internal.config.providers import PiperConfig
from voicegate.internal.devices import (
    CPU_PROVIDER,
    CUDA_PROVIDER,
    DeviceUnavailable,
    cuda_devices_ctranslate2,
    devices_phrase,
    missed_device,
    onnx_available_providers,
    onnx_cuda_available,
    onnx_device,
    onnx_providers,
    whisper_device,
)
from voicegate.internal.tts.piper import PiperTextToSpeech
from voicegate.internal.tts.piper_voice import piper_uses_cuda
from voicegate.server.providers import build_stt, check_providers

WITH_CUDA = ["TensorrtExecutionProvider", CUDA_PROVIDER, CPU_PROVIDER]  # what onnxruntime-gpu lists
CPU_ONLY = ["AzureExecutionProvider", CPU_PROVIDER]  # what the plain onnxruntime wheel lists
needs_no_cuda = pytest.mark.skipif(
    cuda_devices_ctranslate2() > 0 or onnx_cuda_available(),
    reason="this machine has CUDA: the refusal of a missing GPU cannot be seen here")


# ---- Whisper's device and compute type ------------------------------------------------------------

def test_auto_without_a_cuda_device_is_the_cpu_in_int8() -> None:
    assert whisper_device("auto", 0) == ("cpu", "int8")


def test_auto_with_one_cuda_device_is_cuda_in_float16() -> None:
    assert whisper_device("auto", 1) == ("cuda", "float16")


def test_cpu_stays_on_the_cpu_on_a_machine_with_gpus() -> None:
    assert whisper_device("cpu", 2) == ("cpu", "int8")


def test_cuda_with_a_device_is_cuda() -> None:
    assert whisper_device("cuda", 1) == ("cuda", "float16")


def test_cuda_without_a_device_is_refused_naming_the_key_and_the_reason() -> None:
    with pytest.raises(DeviceUnavailable, match=r'^whisper\.device: "cuda" but CTranslate2 sees no CUDA') as caught:
        whisper_device("cuda", 0)
    assert '"auto"' in str(caught.value) and "docs/performance.md" in str(caught.value)


def test_an_explicit_compute_type_is_used_as_given_on_either_device() -> None:
    assert whisper_device("auto", 0, "float32") == ("cpu", "float32")
    assert whisper_device("auto", 1, "int8_float16") == ("cuda", "int8_float16")
    assert whisper_device("cpu", 1, "auto") == ("cpu", "int8")


def test_devices_are_counted_in_words() -> None:
    assert [devices_phrase(n) for n in (0, 1, 2)] == ["no CUDA device", "1 CUDA device", "2 CUDA devices"]


# ---- onnxruntime's providers (Piper, Smart Turn) ---------------------------------------------------

def test_auto_lists_cuda_first_with_the_cpu_behind_it_only_when_onnxruntime_has_cuda() -> None:
    assert onnx_providers("auto", WITH_CUDA, "pipeline.end_of_turn_device") == [CUDA_PROVIDER, CPU_PROVIDER]
    assert onnx_providers("auto", CPU_ONLY, "pipeline.end_of_turn_device") == [CPU_PROVIDER]


def test_cpu_is_the_cpu_provider_alone_even_when_cuda_is_there() -> None:
    assert onnx_providers("cpu", WITH_CUDA, "piper.device") == [CPU_PROVIDER]


def test_cuda_is_the_cuda_provider_alone_so_a_fallback_shows() -> None:
    assert onnx_providers("cuda", WITH_CUDA, "piper.device") == [CUDA_PROVIDER]
    assert onnx_device([CUDA_PROVIDER]) == "cuda" and onnx_device([CPU_PROVIDER]) == "cpu"


def test_cuda_without_the_provider_is_refused_naming_the_key_and_what_there_is() -> None:
    with pytest.raises(DeviceUnavailable, match=r'^pipeline\.end_of_turn_device: "cuda" but this Python\'s '
                                                r"onnxruntime has no CUDA provider \(it has AzureExecutionProvider, "
                                                r"CPUExecutionProvider\); install onnxruntime-gpu"):
        onnx_providers("cuda", CPU_ONLY, "pipeline.end_of_turn_device")


def test_a_session_that_fell_back_to_the_cpu_misses_only_a_cuda_request() -> None:
    assert missed_device([CUDA_PROVIDER], [CPU_PROVIDER])
    assert not missed_device([CUDA_PROVIDER], [CUDA_PROVIDER, CPU_PROVIDER])
    assert not missed_device([CUDA_PROVIDER, CPU_PROVIDER], [CPU_PROVIDER])  # auto: the CPU was allowed
    assert not missed_device([CPU_PROVIDER], [CPU_PROVIDER])


def test_piper_gets_cuda_from_this_pythons_onnxruntime_but_a_custom_program_only_when_asked() -> None:
    assert piper_uses_cuda(PiperConfig(), WITH_CUDA)
    assert not piper_uses_cuda(PiperConfig(), CPU_ONLY)
    assert not piper_uses_cuda(PiperConfig(device="cpu"), WITH_CUDA)
    # A deployer's own program has its own onnxruntime, which `available` does not describe.
    assert not piper_uses_cuda(PiperConfig(command=["/opt/piper/piper"]), WITH_CUDA)
    assert piper_uses_cuda(PiperConfig(command=["/opt/piper/piper"], device="cuda"), CPU_ONLY)
    with pytest.raises(DeviceUnavailable, match=r'^piper\.device: "cuda"'):
        piper_uses_cuda(PiperConfig(device="cuda"), CPU_ONLY)


# ---- this machine, for real -------------------------------------------------------------------------

def test_the_probes_answer_without_raising_whatever_the_machine() -> None:
    assert cuda_devices_ctranslate2() >= 0
    assert CPU_PROVIDER in onnx_available_providers()


async def test_the_installed_piper_accepts_cuda_and_still_speaks(tmp_path: Path) -> None:
    # `piper.command` as a program of the deployer's, so "cuda" is passed as asked: the flag is one the
    # installed piper-tts takes (on a machine without CUDA its onnxruntime runs the voice on the CPU).
    engine = PiperTextToSpeech(PiperConfig(command=[sys.executable, "-m", "piper"], device="cuda", workers=1))
    try:
        assert engine.cuda and "--cuda" in engine._argv(tmp_path / "voice.onnx")
        audio = b"".join([chunk async for chunk in engine.synthesize("Your order has shipped.", 16000)])
        assert len(audio) > 16000  # more than half a second of speech at 16 kHz
    finally:
        await engine.aclose()
    assert "--cuda" not in PiperTextToSpeech(PiperConfig(device="cpu"))._argv(tmp_path / "voice.onnx")


def config_in(tmp_path: Path) -> Config:
    config = Config()
    config.server.data_dir = str(tmp_path / "data")
    return config


@needs_no_cuda
def test_asking_for_cuda_on_this_machine_stops_start_up_naming_each_key(tmp_path: Path) -> None:
    config = config_in(tmp_path)
    config.whisper.device = "cuda"
    config.piper.device = "cuda"
    config.pipeline.end_of_turn_device = "cuda"
    with pytest.raises(ConfigError) as caught:
        check_providers(config)
    keys = [problem.split(":", 1)[0] for problem in caught.value.problems]
    assert keys == ["whisper.device", "piper.device", "pipeline.end_of_turn_device"], caught.value.problems
    # Built directly (as `voicegate talk` and the benchmarks do), the engine refuses the same way.
    config.piper.device = config.pipeline.end_of_turn_device = "auto"
    with pytest.raises(ConfigError, match=r'^whisper\.device: "cuda" but CTranslate2 sees no CUDA device'):
        build_stt(config)


@needs_no_cuda
def test_serve_with_whisper_on_cuda_and_no_gpu_exits_with_the_key_instead_of_using_the_cpu(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f"[server]\ndata_dir = '{tmp_path / 'data'}'\n[whisper]\ndevice = 'cuda'\n")
    result = run_cli("--config", str(path), "serve")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "the configuration has errors" in result.stderr
    assert 'whisper.device: "cuda" but CTranslate2 sees no CUDA device' in result.stderr


def test_auto_and_cpu_never_stop_start_up(tmp_path: Path) -> None:
    config = config_in(tmp_path)
    config.piper.device = "cpu"
    check_providers(config)  # whisper and Smart Turn on "auto": the CPU here when there is no GPU
