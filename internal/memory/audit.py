"""memory-audit.jsonl: one line per memory write attempt, with outcomes and revisions, never memory text.

Written off the event loop. The owner appears only as a short one-way hash of the owner key, so the
log links a person's writes together without naming them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

from internal.memory.owner import audit_hash

log = logging.getLogger(__name__)


class AuditLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = asyncio.Lock()

    async def record(self, owner_key: str, *, source: str, operation: str, outcome: str, scope: str = "",
                     base_revision: int | None = None, revision: int | None = None, error: str = "",
                     session_id: str | None = None, extra: dict[str, Any] | None = None) -> None:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "owner": audit_hash(owner_key),
            "source": source,
            "operation": operation,
            "outcome": outcome,
        }
        optional = {"scope": scope, "base_revision": base_revision, "revision": revision, "error": error,
                    "session_id": session_id}
        entry.update({k: v for k, v in optional.items() if v not in (None, "")})
        if extra:
            entry.update(extra)
        line = json.dumps(entry, ensure_ascii=False) + "\n"
        async with self._lock:
            try:
                await asyncio.to_thread(self._append, line)
            except OSError as exc:  # the audit log failing must not fail the write it describes
                log.error("cannot write the memory audit log: %s", exc.strerror)

    def _append(self, line: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(line)
