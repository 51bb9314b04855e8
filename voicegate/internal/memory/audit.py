"""memory-audit.jsonl: one line per memory write attempt, with outcomes and revisions, never memory text.

Written off the event loop. The owner appears only as a short one-way hash of the owner key, so the
log links a person's writes together without naming them.

One file per UTC day: the live file keeps its name, and the first record of a new day first renames it
to `memory-audit-YYYY-MM-DD.jsonl` (the day of its last line). Rotated files whose day is entirely older
than the retention are deleted, both then and by `prune()` (the retention sweeper's call), so the log
is kept as long as memory is and no longer.
"""

from __future__ import annotations

import asyncio
import calendar
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from voicegate.internal.memory.owner import audit_hash

log = logging.getLogger(__name__)

DAY_S = 86400.0


def utc_day(at: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(at))


class AuditLog:
    def __init__(self, path: Path, retention_days: float = 90, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._retention_s = retention_days * DAY_S
        self._clock = clock
        self._lock = asyncio.Lock()
        self._day: str | None = None  # UTC day of the live file's last line, once known
        self._rotated = re.compile(rf"^{re.escape(path.stem)}-(\d{{4}}-\d{{2}}-\d{{2}}){re.escape(path.suffix)}$")

    async def record(self, owner_key: str, *, source: str, operation: str, outcome: str, scope: str = "",
                     base_revision: int | None = None, revision: int | None = None, error: str = "",
                     session_id: str | None = None, extra: dict[str, Any] | None = None) -> None:
        now = self._clock()
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
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
                await asyncio.to_thread(self._append, line, now)
            except OSError as exc:  # the audit log failing must not fail the write it describes
                log.error("cannot write the memory audit log: %s", exc.strerror)

    async def prune(self) -> int:
        """Rotate a live file left from an earlier day and delete rotated files past the retention."""
        async with self._lock:
            try:
                return await asyncio.to_thread(self._prune, self._clock())
            except OSError as exc:
                log.error("cannot prune the memory audit log: %s", exc.strerror)
                return 0

    def files(self) -> list[Path]:
        """Every file of the log, oldest first (rotated days, then the live file). Blocking: call it in a
        thread."""
        try:
            rotated = sorted(p for p in self.path.parent.iterdir() if self._rotated.match(p.name))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [*rotated, self.path] if self.path.exists() else rotated

    def _append(self, line: str, now: float) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._rotate(utc_day(now)):
            self._delete_expired(now)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(line)
        self._day = utc_day(now)

    def _prune(self, now: float) -> int:
        if not self.path.parent.is_dir():
            return 0
        self._rotate(utc_day(now))
        return self._delete_expired(now)

    def _rotate(self, today: str) -> bool:
        """Move the live file aside when its last line is from another day; True when it moved."""
        if self._day is None:
            try:  # a restart: the file was last written on the day of its mtime
                self._day = utc_day(self.path.stat().st_mtime)
            except FileNotFoundError:
                return False
        if self._day == today:
            return False
        day, self._day = self._day, None
        if not self.path.exists():
            return False
        target = self.path.with_name(f"{self.path.stem}-{day}{self.path.suffix}")
        if target.exists():  # the clock went back, or another process rotated: add to it, lose nothing
            with self.path.open("rb") as source, target.open("ab") as out:
                shutil.copyfileobj(source, out)
            self.path.unlink()
        else:
            os.replace(self.path, target)
        return True

    def _delete_expired(self, now: float) -> int:
        """Delete rotated files whose whole day ended more than the retention ago."""
        removed = 0
        for path in self.path.parent.iterdir():
            match = self._rotated.match(path.name)
            if match is None:
                continue
            day_start = calendar.timegm(time.strptime(match.group(1), "%Y-%m-%d"))
            if day_start + DAY_S + self._retention_s <= now:
                path.unlink(missing_ok=True)
                removed += 1
        return removed
