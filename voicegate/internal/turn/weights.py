"""Where the turn-taking models' weights come from, each file checked against a SHA-256 pinned here.

- Silero VAD v6: the ONNX file faster-whisper ships in its wheel (already a dependency; MIT).
- Smart Turn v3.2 (BSD-2, Daily): the ONNX file inside the pipecat-ai wheel. pipecat is not a runtime
  dependency: the set-up (`python -m voicegate.internal.turn.weights`, run by scripts/bootstrap.sh) downloads that
  one pinned wheel from PyPI with `pip download --no-deps`, checks the wheel's hash, extracts the model
  and checks its hash. A server finds it there, or at `pipeline.end_of_turn_model`, or fetches it the same
  way at start-up when `pipeline.end_of_turn_download` is on.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from voicegate.internal.stt.whisper_models import sha256_of

SILERO_SHA256 = "4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2"
SMART_TURN_FILE = "smart-turn-v3.2-cpu.onnx"
SMART_TURN_SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"
SMART_TURN_WHEEL = "pipecat_ai-1.14.0-py3-none-any.whl"
SMART_TURN_REQUIREMENT = "pipecat-ai==1.14.0"
SMART_TURN_WHEEL_SHA256 = "0352f504b44e78bdf524e45af4bc759601c835b9b7dc195efe5e03384b974a44"
SMART_TURN_MEMBER = f"pipecat/audio/turn/smart_turn/data/{SMART_TURN_FILE}"
FETCH_TIMEOUT_S = 300.0

Progress = Callable[[str], None]


class TurnModelError(Exception):
    """A model file is missing or not the pinned one; the message says where we looked and what to run."""


@lru_cache(maxsize=16)
def _hash_matches(path: str, size: int, mtime_ns: int, ctime_ns: int, inode: int, expected: str) -> bool:
    return sha256_of(Path(path)) == expected


def verified(path: Path, expected: str) -> bool:
    """The file exists and is the pinned one (hashed once per process and file identity)."""
    try:
        stat = path.stat()
    except OSError:
        return False
    return _hash_matches(str(path), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, expected)


def setup_models_dir() -> Path:
    """Where the set-up puts model files: inside the environment (removed with it by `make clean`)."""
    return Path(sys.prefix) / "share" / "voicegate" / "models"


def cache_models_dir() -> Path:
    """The fallback when the environment is read-only (a packaged install)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "voicegate" / "models"


def silero_path() -> Path:
    """Silero VAD v6 from faster-whisper's package data, verified."""
    import importlib.util

    spec = importlib.util.find_spec("faster_whisper")
    if spec is None or not spec.submodule_search_locations:
        raise TurnModelError("pipeline.vad: silero needs faster-whisper installed (pip install -e .)")
    path = Path(next(iter(spec.submodule_search_locations))) / "assets" / "silero_vad_v6.onnx"
    if not verified(path, SILERO_SHA256):
        raise TurnModelError(f"pipeline.vad: {path} is missing or not the pinned Silero VAD v6 "
                             f"(sha256 {SILERO_SHA256[:12]}...); reinstall faster-whisper")
    return path


def smart_turn_path(configured: str = "", *, download: bool = True, progress: Progress | None = None,
                    directories: tuple[Path, ...] | None = None) -> Path:
    """The Smart Turn model: the configured file, the set-up's copy, the cache, or fetched from PyPI.

    `directories` (default: the set-up's and the cache) are searched in order and the first writable one
    receives a download.
    """
    tried: list[str] = []
    search = directories if directories is not None else (setup_models_dir(), cache_models_dir())
    if configured:
        path = Path(configured).expanduser()
        if verified(path, SMART_TURN_SHA256):
            return path
        raise TurnModelError(f"pipeline.end_of_turn_model: {path} is missing or not Smart Turn v3.2 "
                             f"(sha256 {SMART_TURN_SHA256[:12]}...)")
    for directory in search:
        path = directory / SMART_TURN_FILE
        if verified(path, SMART_TURN_SHA256):
            return path
        tried.append(f"{path}: {'not the pinned file' if path.exists() else 'absent'}")
    if download:
        try:
            return fetch_smart_turn(next((d for d in search if _writable(d)), None), progress=progress)
        except TurnModelError as exc:
            tried.append(str(exc))
    else:
        tried.append("download from PyPI: off (pipeline.end_of_turn_download = false)")
    raise TurnModelError("pipeline.end_of_turn: Smart Turn v3.2 not found. Tried: " + "; ".join(tried)
                         + f". Run `{sys.executable} -m voicegate.internal.turn.weights` (in a checkout: `make serve`) "
                         "with access to PyPI, set pipeline.end_of_turn_model to the file, or set "
                         'pipeline.end_of_turn = "off"')


def fetch_smart_turn(target_dir: Path | None = None, progress: Progress | None = None) -> Path:
    """Download the pinned pipecat-ai wheel (no dependencies), extract the model, check both hashes."""
    say = progress or (lambda message: None)
    directories = [target_dir] if target_dir is not None else [setup_models_dir(), cache_models_dir()]
    target = next((d for d in directories if _writable(d)), None)
    if target is None:
        raise TurnModelError("no writable directory for the model: " + ", ".join(map(str, directories)))
    with tempfile.TemporaryDirectory(prefix="voicegate-smart-turn-") as scratch:
        say(f"fetching Smart Turn v3.2: {SMART_TURN_REQUIREMENT} wheel (12 MB, no dependencies) from PyPI")
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--disable-pip-version-check", "--progress-bar", "on" if progress else "off",
                   "-d", scratch, SMART_TURN_REQUIREMENT]
        try:
            done = subprocess.run(command, stdout=None if progress else subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, timeout=FETCH_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired as exc:
            raise TurnModelError(f"pip download {SMART_TURN_REQUIREMENT}: no answer in "
                                 f"{FETCH_TIMEOUT_S:.0f} s") from exc
        wheel = Path(scratch) / SMART_TURN_WHEEL
        if done.returncode != 0 or not wheel.is_file():
            last = (done.stderr or "").strip().splitlines()[-1:] or ["no wheel"]
            raise TurnModelError(f"pip download {SMART_TURN_REQUIREMENT} failed: {last[0]}")
        if sha256_of(wheel) != SMART_TURN_WHEEL_SHA256:
            raise TurnModelError(f"{SMART_TURN_WHEEL} from the index is not the pinned wheel (sha256 mismatch)")
        say("extracting and checking the model")
        return extract_model(wheel, target)


def extract_model(wheel: Path, target_dir: Path) -> Path:
    """Copy the model out of the wheel into `target_dir`, written whole or not at all."""
    target_dir.mkdir(parents=True, exist_ok=True)
    final = target_dir / SMART_TURN_FILE
    partial = target_dir / f".{SMART_TURN_FILE}.{os.getpid()}.part"
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(SMART_TURN_MEMBER) as source, \
                partial.open("wb") as sink:
            while chunk := source.read(1 << 20):
                sink.write(chunk)
    except (KeyError, zipfile.BadZipFile) as exc:
        partial.unlink(missing_ok=True)
        raise TurnModelError(f"{wheel.name} has no {SMART_TURN_MEMBER}") from exc
    if sha256_of(partial) != SMART_TURN_SHA256:
        partial.unlink(missing_ok=True)
        raise TurnModelError(f"{SMART_TURN_MEMBER} in {wheel.name} is not the pinned model (sha256 mismatch)")
    os.replace(partial, final)
    return final


def _writable(directory: Path) -> bool:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(directory, os.W_OK)


def main() -> int:
    """Set-up entry point: make sure the Smart Turn model is in the environment (idempotent)."""
    path = setup_models_dir() / SMART_TURN_FILE
    if verified(path, SMART_TURN_SHA256):
        return 0
    try:
        found = fetch_smart_turn(setup_models_dir(),
                                 progress=lambda message: print(f"bootstrap: {message}", flush=True))
    except TurnModelError as exc:
        print(f"bootstrap: {exc}", file=sys.stderr)
        return 1
    print(f"bootstrap: Smart Turn v3.2 verified at {found}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
