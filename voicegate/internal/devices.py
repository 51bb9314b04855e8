"""Which device each local engine runs on: CTranslate2 for Whisper, onnxruntime for Piper and Smart Turn.

Every `*.device` key takes "auto", "cpu" or "cuda". "auto" lets one config move between a laptop and a
GPU host: the GPU when this machine has one, else the CPU. "cuda" is a promise, not a preference: a
deployer who sized a node for the GPU and silently got the CPU would find out from callers waiting
seconds for every answer, so a "cuda" this machine cannot honour stops start-up, naming the key.

The policy is pure (a request and what the machine offers in, a choice out); the two probes are the only
functions here that look at the machine, and neither lets an error escape: a library that cannot even
say how many GPUs it sees has none to offer.

The Silero VAD stays on the CPU whatever these keys say: it runs on every 32 ms of every call's audio,
and a GPU kernel launch plus two copies cost more than the ~0.1 ms the CPU takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

Device = Literal["auto", "cpu", "cuda"]

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
# On the CPU, int8 was as fast as int8_float32 and 1.5x faster than float32 for the same words on
# telephone speech (docs/performance.md, "Offline speech"). On a GPU, float16 is the precision its
# tensor cores run natively; int8 there saves memory rather than time (faster-whisper's own benchmark:
# large-v2 1m03s in fp16, 59s in int8, 4.5 against 2.9 GB; docs/performance.md, "GPU").
CPU_COMPUTE_TYPE = "int8"
CUDA_COMPUTE_TYPE = "float16"


class DeviceUnavailable(Exception):
    """A device the config names that this machine cannot provide; the message starts with the key."""


# ---- what the machine offers ----------------------------------------------------------------------

def cuda_devices_ctranslate2() -> int:
    """CUDA devices CTranslate2 can use here (0 without a driver, a GPU, or a CUDA build)."""
    try:
        import ctranslate2

        return int(ctranslate2.get_cuda_device_count())
    except Exception:  # an import or driver failure means the same as no device
        return 0


def onnx_available_providers() -> list[str]:
    """The execution providers this Python's onnxruntime was built with ([] when it cannot load)."""
    try:
        import onnxruntime

        return list(onnxruntime.get_available_providers())
    except Exception:
        return []


def onnx_cuda_available() -> bool:
    """onnxruntime here has its CUDA provider (the onnxruntime-gpu build).

    The list says what the build contains, not that a GPU is attached: onnxruntime-gpu on a machine
    without one lists CUDA too, and its session falls back to the CPU with a printed warning.
    """
    return CUDA_PROVIDER in onnx_available_providers()


# ---- the policy -------------------------------------------------------------------------------------

def devices_phrase(count: int) -> str:
    return "no CUDA device" if count == 0 else f"{count} CUDA device{'s' if count != 1 else ''}"


def whisper_device(requested: str, cuda_count: int, compute_type: str = "auto",
                   key: str = "whisper.device") -> tuple[str, str]:
    """(device, compute type) for CTranslate2. `compute_type` "auto" is the device's own; any other value
    is used as given (CTranslate2 refuses one the device cannot run, when the worker loads the model)."""
    if requested not in ("auto", "cpu", "cuda"):
        raise DeviceUnavailable(f'{key}: must be "auto", "cpu" or "cuda" (got {requested!r})')
    if requested == "cuda" and cuda_count == 0:
        raise DeviceUnavailable(
            f'{key}: "cuda" but CTranslate2 sees no CUDA device on this machine (no NVIDIA GPU, no driver, '
            'or CUDA hidden by CUDA_VISIBLE_DEVICES); set it to "auto" or "cpu", or see docs/performance.md, "GPU"')
    device = "cuda" if requested == "cuda" or (requested == "auto" and cuda_count > 0) else "cpu"
    if compute_type == "auto":
        compute_type = CUDA_COMPUTE_TYPE if device == "cuda" else CPU_COMPUTE_TYPE
    return device, compute_type


def onnx_providers(requested: str, available: Sequence[str], key: str) -> list[str]:
    """onnxruntime's `providers=` for a device request, best first.

    "auto" lists the CPU after CUDA, so a session whose CUDA provider cannot start (a GPU build on a
    machine without the GPU) still runs. "cuda" lists CUDA alone: `missed_device` can then tell that
    onnxruntime fell back to the CPU behind the deployer's back.
    """
    if requested == "cpu":
        return [CPU_PROVIDER]
    if requested == "cuda":
        if CUDA_PROVIDER not in available:
            raise DeviceUnavailable(
                f'{key}: "cuda" but this Python\'s onnxruntime has no CUDA provider (it has '
                f'{", ".join(available) or "none"}); install onnxruntime-gpu in its place, or set it to "auto" '
                'or "cpu" (docs/performance.md, "GPU")')
        return [CUDA_PROVIDER]
    if requested != "auto":
        raise DeviceUnavailable(f'{key}: must be "auto", "cpu" or "cuda" (got {requested!r})')
    return [CUDA_PROVIDER, CPU_PROVIDER] if CUDA_PROVIDER in available else [CPU_PROVIDER]


def missed_device(requested: Sequence[str], used: Sequence[str]) -> bool:
    """A session asked for an accelerator with no CPU fallback (a "cuda" request) runs without it:
    onnxruntime retries a provider that fails to start on the CPU and only prints a warning."""
    return CPU_PROVIDER not in requested and (not used or used[0] != requested[0])


def onnx_device(providers: Sequence[str]) -> str:
    """"cuda" or "cpu": the device a provider list puts first."""
    return "cuda" if providers and providers[0] == CUDA_PROVIDER else "cpu"
