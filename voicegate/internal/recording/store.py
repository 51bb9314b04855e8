"""Where recordings live: data_dir/recordings/, one audio file and one JSON sidecar per call.

    recordings/<session id>.wav (or .ogg)     caller on the left channel, agent on the right
    recordings/<session id>.json              who (owner key, never a number), when, consent, format

Everything here is plain files, so the server, `voicegate memory delete|export` and the retention
sweep (in any process on this data directory) see the same recordings. The sidecar is written when
the recording starts, so a live recording can be found (and erased) too; it is rewritten at the end.
Files are 0600 in a 0700 directory. Nothing in this module ever logs a recording's content or key.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from voicegate.internal.memory.durable import write_atomically
from voicegate.internal.recording.formats import MEDIA_TYPES

RECORDINGS_DIR = "recordings"
SIDECAR_SUFFIX = ".json"
SIDECAR_VERSION = 1
_SESSION_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")
DAY_S = 86400.0


def iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def epoch(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


@dataclass
class RecordingInfo:
    """A recording's sidecar. `owner_key` is the caller's memory owner key (an HMAC of their verified
    identity: internal/memory/owner.py), None for an anonymous caller."""

    session_id: str
    file: str  # the audio file's name, beside the sidecar
    format: str
    sample_rate: int
    transport: str
    owner_key: str | None
    identity_kind: str
    consent: str
    started_at: str
    call_id: str = ""  # the SIP Call-ID, for SIP calls
    ended_at: str | None = None
    duration_s: float = 0.0
    bytes: int = 0
    gaps_s: float = 0.0  # audio written as silence because the disk could not keep up
    channels: dict[str, str] = field(default_factory=lambda: {"left": "caller", "right": "agent"})
    version: int = SIDECAR_VERSION

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> RecordingInfo | None:
        known = {name: data[name] for name in RecordingInfo.__dataclass_fields__ if name in data}
        try:
            return RecordingInfo(**known)
        except TypeError:
            return None

    @property
    def media_type(self) -> str:
        return MEDIA_TYPES.get(Path(self.file).suffix, "application/octet-stream")

    def last_moment(self) -> float:
        """When the recording was last written to (its end, or its start while live or after a crash)."""
        return epoch(self.ended_at) or epoch(self.started_at) or 0.0


class RecordingStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def ensure(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            self.directory.chmod(0o700)

    def audio_path(self, info: RecordingInfo) -> Path:
        return self.directory / Path(info.file).name  # a sidecar never names a file elsewhere

    def sidecar_path(self, session_id: str) -> Path:
        if not _SESSION_ID.fullmatch(session_id):
            raise ValueError(f"not a session id: {session_id!r}")
        return self.directory / f"{session_id}{SIDECAR_SUFFIX}"

    def write(self, info: RecordingInfo) -> None:
        write_atomically(self.sidecar_path(info.session_id), json.dumps(info.as_json(), indent=2) + "\n")

    def read(self, session_id: str) -> RecordingInfo | None:
        try:
            path = self.sidecar_path(session_id)
            return RecordingInfo.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return None

    def all(self) -> Iterator[RecordingInfo]:
        try:
            paths = sorted(self.directory.glob(f"*{SIDECAR_SUFFIX}"))
        except OSError:
            return
        for path in paths:
            info = self.read(path.stem) if _SESSION_ID.fullmatch(path.stem) else None
            if info is not None:
                yield info

    def find(self, call: str) -> RecordingInfo | None:
        """The recording of a call named by its session id or its SIP Call-ID."""
        if _SESSION_ID.fullmatch(call):
            info = self.read(call)
            if info is not None:
                return info
        return next((info for info in self.all() if info.call_id and info.call_id == call), None)

    def of_owner(self, owner_key: str) -> list[RecordingInfo]:
        return [info for info in self.all() if info.owner_key == owner_key]

    def described(self, owner_key: str) -> list[dict[str, Any]]:
        """One caller's recordings as their sidecars say, with where each audio file is (a subject access
        export lists them: the audio itself is not copied, it can be hours long; `path` is where to fetch it)."""
        return [{**info.as_json(), "path": str(self.audio_path(info).resolve())} for info in self.of_owner(owner_key)]

    def delete(self, info: RecordingInfo) -> list[str]:
        """Remove a recording: its audio first (a writer still on it sees its file gone and stops), then
        its sidecar. Returns the names of the files removed."""
        removed: list[str] = []
        for path in (self.audio_path(info), self.sidecar_path(info.session_id)):
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            removed.append(path.name)
        return removed

    def delete_owner(self, owner_key: str) -> list[str]:
        """Every recording of one caller; the names of the audio files removed (what the operator is told)."""
        names: list[str] = []
        for info in self.of_owner(owner_key):
            removed = self.delete(info)
            names += [name for name in removed if not name.endswith(SIDECAR_SUFFIX)]
        return names

    def expired(self, retention_days: float, now: float | None = None) -> list[RecordingInfo]:
        cutoff = (time.time() if now is None else now) - retention_days * DAY_S
        return [info for info in self.all() if info.last_moment() < cutoff]

    def sweep(self, retention_days: float, now: float | None = None) -> int:
        """Delete the recordings older than the retention, and audio or temporary files no sidecar
        names (a crash between creating a file and its sidecar) once they are as old; returns how many
        recordings (or orphaned files) went."""
        moment = time.time() if now is None else now
        removed = 0
        named: set[str] = set()
        for info in self.all():
            if info.last_moment() < moment - retention_days * DAY_S:
                self.delete(info)
                removed += 1
            else:
                named |= {info.file, f"{info.session_id}{SIDECAR_SUFFIX}"}
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return removed
        for entry in entries:
            if entry.name in named or not entry.is_file():
                continue
            with contextlib.suppress(OSError):
                if entry.stat().st_mtime < moment - retention_days * DAY_S:
                    os.unlink(entry.path)
                    removed += 1
        return removed

    def totals(self) -> tuple[int, int]:
        """(recordings, bytes of their audio) on disk now."""
        count = size = 0
        for info in self.all():
            with contextlib.suppress(OSError):
                size += self.audio_path(info).stat().st_size
                count += 1
        return count, size
