"""A caller's rights over their call recordings when memory is off: erasure, access and expiry with no
memory runtime at all.

Recording names its caller by the memory owner key (an HMAC of the verified identity under the owner-key
secret: internal/memory/owner.py), whether or not memory is on, so the same secret finds the same
recordings here. With memory on, internal/memory/subject.py erases and exports recordings together with
memory; this module is the path for the default configuration (memory off, recording on or once on),
used by DELETE /api/admin/memory/{caller} and `voicegate memory delete|export|purge-expired`.

Nothing here writes a secret: a data directory without `owner-key.secret` (and no
`memory.owner_key_secret`) never recorded a verified caller under any key, so a key made with a fresh
secret simply finds nothing, and the file is left for the first server that records to create.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from voicegate.internal.identity import CallerIdentity
from voicegate.internal.memory.owner import OwnerKeys, read_secret
from voicegate.internal.memory.subject import RECORDINGS_REMOVED
from voicegate.internal.recording.store import RECORDINGS_DIR, RecordingStore

MEMORY_OFF_NOTE = ("memory is off ([memory] enabled = false): only this data directory's call recordings were "
                   "looked at")


def recordings_store(data_dir: Path) -> RecordingStore:
    return RecordingStore(data_dir / RECORDINGS_DIR)


class RecordingOwners:
    """Owner keys of callers as recording sidecars carry them, from the owner-key secret alone."""

    def __init__(self, configured_secret: str, data_dir: Path) -> None:
        self._keys = OwnerKeys(read_secret(configured_secret, data_dir).value)

    def owner_key(self, identity: CallerIdentity) -> str | None:
        return self._keys.for_identity(identity)


@dataclass(slots=True)
class RecordingErasure:
    removed: dict[str, int]
    recordings: list[str] = field(default_factory=list)  # the audio files' names


async def erase_recordings(store: RecordingStore, owner: str) -> RecordingErasure:
    """Every recording of `owner` in this data directory; a recording still being written stops at its
    next second (its writer finds the file gone)."""
    names = await asyncio.to_thread(store.delete_owner, owner)
    return RecordingErasure({RECORDINGS_REMOVED: len(names)}, names)


def export_recordings(store: RecordingStore, owner: str, caller: str | None, retention_days: float) -> dict[str, Any]:
    """What memory's export answers (internal/memory/subject.py export_everything), for a server with
    memory off: the caller's recordings with where each file is, and no memory tables."""
    recorded = store.described(owner)
    return {
        "caller": caller,
        "owner_key": owner,
        "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "memory": "off",
        "recording_retention_days": retention_days,
        "stored": bool(recorded),
        "counts": {"recordings": len(recorded)},
        "tables": {},
        "pending_hangup_writes": [],
        "recordings": recorded,
        "audit": [],
    }
