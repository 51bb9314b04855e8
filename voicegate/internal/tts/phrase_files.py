"""The fixed-phrase cache on disk: one file per render, each carrying its own check, the lot bounded by size.

A file is a header and the audio (16-bit little-endian mono PCM):

    magic "VGPHRASE", version, format, sample rate, audio length, SHA-256

The SHA-256 covers the phrase's key (its file name), the header's other fields and the audio, so a file
that was truncated, bit-rotted, half-written before a power cut, copied under another phrase's name, or
written for another rate or format fails the check: it is deleted and the phrase rendered again, never
played. It detects damage, not a forger: whoever can write the directory can write a good check too.

Files are written whole under a temporary name and renamed, so a reader (this process or another node
sharing the directory) sees the old file or the new one, never half of one. Each use stamps the file's
mtime, and the directory is pruned, least recently used first, to the cache's byte bound after each write
and when a cache opens on it (start-up).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MAGIC = b"VGPHRASE"
VERSION = 1
S16LE_MONO = 1  # the only format the providers render
HEADER = struct.Struct("<8sHHIQ32s")  # magic, version, format, sample rate, audio bytes, SHA-256
SUFFIX = ".phrase"
PART_SUFFIX = ".part"
# Files of the first version: raw audio named <key>.pcm with nothing to check it by. Never read; deleted.
LEGACY_SUFFIX = ".pcm"
# A write takes milliseconds; a temporary file older than this was left by a process that died mid-write.
# A younger one may be another process's write in flight, so it is neither counted nor removed.
STALE_PART_S = 60.0


class BadPhraseFile(ValueError):
    """A file that is not a good render of the phrase it is named after."""


def key_rate(key: str) -> int:
    """The output rate a key was made for (`FixedPhrases.key` ends it with `-<rate>`); 0 when it has none."""
    _, _, rate = key.rpartition("-")
    return int(rate) if rate.isdigit() else 0


def _digest(key: str, fields: bytes, pcm: bytes) -> bytes:
    return hashlib.sha256(key.encode("utf-8") + b"\x00" + fields + pcm).digest()


def pack(key: str, sample_rate: int, pcm: bytes) -> bytes:
    fields = HEADER.pack(MAGIC, VERSION, S16LE_MONO, sample_rate, len(pcm), bytes(32))[: HEADER.size - 32]
    return fields + _digest(key, fields, pcm) + pcm


def unpack(key: str, data: bytes) -> bytes:
    """The audio in a file named after `key`; BadPhraseFile (with the reason) unless every check passes."""
    if len(data) < HEADER.size:
        raise BadPhraseFile("shorter than its header")
    magic, version, audio_format, rate, length, digest = HEADER.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise BadPhraseFile("not a phrase file of this version")
    if audio_format != S16LE_MONO or rate != key_rate(key):
        raise BadPhraseFile(f"format {audio_format} at {rate} Hz, not 16-bit mono at {key_rate(key)} Hz")
    pcm = data[HEADER.size :]
    if len(pcm) != length or length == 0 or length % 2:
        raise BadPhraseFile(f"{len(pcm)} bytes of audio where the header says {length}")
    if _digest(key, data[: HEADER.size - 32], pcm) != digest:
        raise BadPhraseFile("its SHA-256 does not match")
    return pcm


@dataclass(frozen=True)
class Entry:
    path: Path
    used: int  # mtime in ns: stamped on every use
    size: int


def to_prune(entries: list[Entry], max_bytes: int) -> list[Entry]:
    """The files to delete to bring the directory within `max_bytes`: least recently used first, just
    enough of them (a phrase kept on disk spares a render at the next start-up, so none goes for nothing)."""
    total = sum(entry.size for entry in entries)
    doomed = []
    for entry in sorted(entries, key=lambda e: (e.used, e.path.name)):
        if total <= max_bytes:
            break
        doomed.append(entry)
        total -= entry.size
    return doomed


def leftover(name: str, age_s: float) -> bool:
    """A file in the directory that is no render and never will be: deleted whatever the bound."""
    return name.endswith(LEGACY_SUFFIX) or (name.endswith(PART_SUFFIX) and age_s > STALE_PART_S)


class PhraseFiles:
    """The renders kept in `directory`, within `max_bytes` together. A file that cannot be read, written or
    deleted is skipped, never an error for the call: the phrase is rendered (again) instead."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._stamp = 0  # the last mtime given, in ns: uses within one process never tie
        self.prune()

    def path(self, key: str) -> Path:
        return self.directory / f"{key}{SUFFIX}"

    def read(self, key: str) -> bytes | None:
        path = self.path(key)
        try:
            with path.open("rb") as file:
                data = file.read(HEADER.size + self.max_bytes + 1)  # a bigger file is no render of ours
        except OSError:
            return None
        try:
            pcm = unpack(key, data)
        except BadPhraseFile as bad:
            log.warning("phrase cache: %s failed its check (%s): deleted, the phrase is rendered again",
                        path.name, bad)
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        self.touch(key)
        return pcm

    def write(self, key: str, pcm: bytes) -> None:
        data = pack(key, key_rate(key), pcm)
        if len(data) > self.max_bytes:
            return
        temporary = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.directory, suffix=PART_SUFFIX)
            with os.fdopen(handle, "wb") as file:
                file.write(data)
            # No fsync: a file cut short by a power cut fails its check and is rendered again, while an
            # fsync here would stall every call on this event loop for a disk flush.
            os.replace(temporary, self.path(key))
        except OSError as exc:
            log.warning("phrase cache: cannot keep a render in %s: %s", self.directory, exc.strerror or exc)
            if temporary is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
            return
        self.touch(key)
        self.prune()

    def touch(self, key: str) -> None:
        """Mark the file used now, for the least-recently-used order of `prune`."""
        self._stamp = max(time.time_ns(), self._stamp + 1000)
        with contextlib.suppress(OSError):  # gone: another process pruned it
            os.utime(self.path(key), ns=(self._stamp, self._stamp))

    def prune(self) -> None:
        """Delete leftovers, then the least recently used renders until the rest fit in `max_bytes`."""
        try:
            listing = list(os.scandir(self.directory))
        except OSError:
            return
        now = time.time_ns()
        entries = []
        for item in listing:
            try:
                info = item.stat(follow_symlinks=False)
            except OSError:
                continue  # deleted meanwhile
            if leftover(item.name, (now - info.st_mtime_ns) / 1e9):
                self._delete(Path(item.path))
            elif item.name.endswith(SUFFIX) and item.is_file(follow_symlinks=False):
                entries.append(Entry(Path(item.path), info.st_mtime_ns, info.st_size))
        for entry in to_prune(entries, self.max_bytes):
            self._delete(entry.path)

    @staticmethod
    def _delete(path: Path) -> None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass  # another process got there first
        except OSError as exc:
            log.warning("phrase cache: cannot delete %s: %s", path, exc.strerror or exc)
