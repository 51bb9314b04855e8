"""A data subject's rights over their memory: erasure and access, covering every copy this process can
reach (the store's tables or files, this data directory's pending hang-up writes, the audit trail, and
the caller's call recordings in this data directory: docs/recording.md).

Erasure goes through the runtime (the writers' lock, the erasure epoch, the change notice every other
process hears); the pending hang-up writes of this data directory are removed as well. Other nodes'
pending writes cannot be reached from here, and need not be: they carry the old epoch and are refused.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from voicegate.internal.identity import CallerIdentity
from voicegate.internal.memory.outbox import owner_files
from voicegate.internal.memory.owner import audit_hash
from voicegate.internal.memory.provider import ChangeSource
from voicegate.internal.memory.runtime import FrontendMemoryRuntime
from voicegate.internal.phone_numbers import normalise_e164

ProgressSink = Callable[[str, int], None]


class CallRecordings(Protocol):
    """The caller's call recordings, which erasure and access reach with their memory: a port, so that
    memory never imports recording (internal/recording/store.py's RecordingStore satisfies it, and recording,
    which stands above memory, names its callers by memory's owner keys)."""

    def delete_owner(self, owner_key: str) -> list[str]:
        """Remove every recording of one caller; the names of the audio files removed."""

    def described(self, owner_key: str) -> list[dict[str, Any]]:
        """One caller's recordings as their sidecars say, each with the path of its audio file."""

CALLER_KINDS = ("sip", "jwt", "trusted_header")
_OWNER_KEY = re.compile(r"[0-9a-f]{64}")


def resolve_caller(caller: str, kind: str | None, region: str) -> CallerIdentity:
    """The identity an operator means (`sip:+15551234567`, `jwt:alice`, or a raw value of `kind`), as
    memory is keyed on it: a phone number in E.164, a national one read in `region`. ValueError if none."""
    if kind is None:
        identity = CallerIdentity.parse(caller)
    elif kind in CALLER_KINDS:
        identity = CallerIdentity(kind, caller)  # type: ignore[arg-type]
    else:
        raise ValueError(f"not a kind of caller: {kind!r} (one of {', '.join(CALLER_KINDS)})")
    if not identity.value:
        raise ValueError("the caller's value is empty")
    if identity.kind == "sip":
        number = normalise_e164(identity.value, region)
        if number is None:
            raise ValueError(f"not a valid phone number: {identity.value!r}")
        identity = CallerIdentity("sip", number)
    return identity


def is_owner_key(text: str) -> bool:
    """An owner key as stored (`voicegate memory list --full`): 64 lowercase hex digits."""
    return _OWNER_KEY.fullmatch(text) is not None


def stderr_progress(what: str, rows: int) -> None:
    """Progress of a long export, on standard error so standard output stays the JSON."""
    print(f"  {what}: {rows} row(s) read", file=sys.stderr, flush=True)


RECORDINGS_REMOVED = "call recordings (files)"


@dataclass(slots=True)
class SubjectErasure:
    removed: dict[str, int]  # what was removed where (tables, files), counts only
    announced: bool  # running servers on the shared database were told
    recordings: list[str] = field(default_factory=list)  # the names of the recordings' audio files removed


async def delete_everywhere(runtime: FrontendMemoryRuntime, owner: str, outbox_dir: Path | None,
                            source: ChangeSource = "cli", recordings: CallRecordings | None = None) -> SubjectErasure:
    """Erase `owner` (every table or file of the store, this data directory's pending writes and their call
    recordings); returns what was removed where, the recordings by name, and whether running servers were
    told through the database. `source` is who asked, for the audit log: "cli", or "api" for the server's
    admin route. A recording still being written stops at its next second: its writer finds its file gone."""
    removed = await runtime.delete_owner(owner, source=source)
    if outbox_dir is not None:
        files = await asyncio.to_thread(owner_files, outbox_dir, owner)
        for path in files:
            path.unlink(missing_ok=True)
        removed["pending hang-up writes (files)"] = len(files)
    names: list[str] = []
    if recordings is not None:
        names = await asyncio.to_thread(recordings.delete_owner, owner)
        removed[RECORDINGS_REMOVED] = len(names)
    announced = runtime.notifies_changes  # the PostgreSQL provider notifies in its transaction
    return SubjectErasure(removed, announced, names)


def _audit_lines(paths: list[Path], tag: str) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for path in paths:
        try:
            with path.open(encoding="utf-8") as source:
                for raw in source:
                    if tag in raw:
                        entry = json.loads(raw)
                        if entry.get("owner") == tag:
                            lines.append(entry)
        except (OSError, ValueError):
            continue
    return lines


async def export_everything(runtime: FrontendMemoryRuntime, owner: str, *, caller: str | None,
                            outbox_dir: Path | None, progress: ProgressSink | None = stderr_progress,
                            recordings: CallRecordings | None = None) -> dict[str, Any]:
    """Everything stored of `owner`, as one JSON-ready object: every table or file of the store
    (history included, expired-but-not-yet-swept rows included, no cap), this data directory's pending
    hang-up writes, the audit trail's lines about them (which never hold memory text), and the list of
    their call recordings with each file's path."""
    tables = await runtime.export(owner, progress)
    pending: list[dict[str, Any]] = []
    if outbox_dir is not None:
        for path in await asyncio.to_thread(owner_files, outbox_dir, owner):
            try:
                pending.append(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                continue
    audit: list[dict[str, Any]] = []
    if runtime.audit is not None:
        audit = await asyncio.to_thread(_audit_lines, runtime.audit.files(), audit_hash(owner))
    recorded = await asyncio.to_thread(recordings.described, owner) if recordings is not None else []
    counts = {name: len(rows) for name, rows in tables.items()}
    counts["pending_hangup_writes"] = len(pending)
    counts["recordings"] = len(recorded)
    stored = any(count for name, count in counts.items() if name not in ("memory_erasures", "erasure"))
    return {
        "caller": caller,
        "owner_key": owner,
        "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "retention_days": runtime.config.retention_days,
        "stored": stored,
        "counts": {**counts, "audit": len(audit)},
        "tables": tables,
        "pending_hangup_writes": pending,
        "recordings": recorded,
        "audit": audit,
    }
