"""The memory audit log: one file per UTC day, rotated files deleted after the retention, never memory text."""

from __future__ import annotations

import calendar
import json
import os
import time
from pathlib import Path

from voicegate.internal.config.providers import MemoryConfig
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.memory.adapters import adapt
from voicegate.internal.memory.audit import AuditLog
from voicegate.internal.memory.owner import OwnerKeys
from voicegate.internal.memory.provider import ChangeContext
from voicegate.internal.memory.providers.inmemory import InMemoryProvider
from voicegate.internal.memory.runtime import FrontendMemoryRuntime

OWNER = "ab" * 16


class Clock:
    def __init__(self, at: str) -> None:
        self.now = 0.0
        self.set(at)

    def set(self, at: str) -> None:
        self.now = float(calendar.timegm(time.strptime(at, "%Y-%m-%dT%H:%M:%S")))

    def __call__(self) -> float:
        return self.now


def files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def record(audit: AuditLog, outcome: str = "applied") -> None:
    await audit.record(OWNER, source="api", operation="append", outcome=outcome, scope="memory")


async def test_the_first_record_of_a_new_utc_day_moves_the_last_days_file_aside(tmp_path: Path) -> None:
    clock = Clock("2024-03-01T23:59:50")
    audit = AuditLog(tmp_path / "memory-audit.jsonl", clock=clock)
    await record(audit, "applied")
    await record(audit, "stale")
    clock.set("2024-03-02T00:00:05")
    await record(audit, "refused")
    assert files(tmp_path) == ["memory-audit-2024-03-01.jsonl", "memory-audit.jsonl"]
    assert [e["outcome"] for e in lines(tmp_path / "memory-audit-2024-03-01.jsonl")] == ["applied", "stale"]
    assert lines(tmp_path / "memory-audit.jsonl")[0]["time"] == "2024-03-02T00:00:05Z"
    assert [p.name for p in audit.files()] == ["memory-audit-2024-03-01.jsonl", "memory-audit.jsonl"]


async def test_after_a_restart_the_live_files_day_comes_from_its_mtime(tmp_path: Path) -> None:
    clock = Clock("2024-03-01T12:00:00")
    await record(AuditLog(tmp_path / "memory-audit.jsonl", clock=clock))
    os.utime(tmp_path / "memory-audit.jsonl", (clock.now, clock.now))
    await record(AuditLog(tmp_path / "memory-audit.jsonl", clock=clock))  # same day: no rotation
    assert files(tmp_path) == ["memory-audit.jsonl"]
    os.utime(tmp_path / "memory-audit.jsonl", (clock.now, clock.now))
    clock.set("2024-03-03T08:00:00")
    await record(AuditLog(tmp_path / "memory-audit.jsonl", clock=clock))
    assert files(tmp_path) == ["memory-audit-2024-03-01.jsonl", "memory-audit.jsonl"]
    assert len(lines(tmp_path / "memory-audit-2024-03-01.jsonl")) == 2


async def test_rotated_files_are_deleted_once_their_day_is_past_the_retention(tmp_path: Path) -> None:
    clock = Clock("2024-03-01T10:00:00")
    audit = AuditLog(tmp_path / "memory-audit.jsonl", retention_days=2, clock=clock)
    for day in ("01", "02", "03", "04", "05"):
        clock.set(f"2024-03-{day}T10:00:00")
        await record(audit)
    # On the 5th, the 1st and 2nd ended more than two days ago; the 3rd ended 34 hours ago.
    assert files(tmp_path) == ["memory-audit-2024-03-03.jsonl", "memory-audit-2024-03-04.jsonl",
                               "memory-audit.jsonl"]
    (tmp_path / "notes.txt").write_text("not ours")
    clock.set("2024-03-20T00:00:00")  # nothing recorded for weeks: the sweeper's prune catches up
    assert await audit.prune() == 3
    assert files(tmp_path) == ["notes.txt"]
    assert await audit.prune() == 0


async def test_the_audit_files_never_hold_memory_text_or_the_owner_key(tmp_path: Path) -> None:
    clock = Clock("2024-03-01T23:59:59")
    runtime = FrontendMemoryRuntime(adapt(InMemoryProvider(90 * 86400.0)), MemoryConfig(enabled=True),
                                    OwnerKeys(b"test-secret"), audit=AuditLog(tmp_path / "memory-audit.jsonl",
                                                                              clock=clock))
    key = runtime.owner_key(CallerIdentity("sip", "+15551234567"))
    assert key is not None
    await runtime.edit(key, "memory", "append", content="- Sam likes oolong.", context=ChangeContext("tool", "s1"))
    clock.set("2024-03-02T00:00:01")
    await runtime.edit(key, "memory", "replace", old_text="oolong", new_text="sencha", context=ChangeContext("api"))
    await runtime.delete_owner(key)
    assert files(tmp_path) == ["memory-audit-2024-03-01.jsonl", "memory-audit.jsonl"]
    raw = "".join((tmp_path / name).read_text() for name in files(tmp_path))
    assert raw.count("\n") == 3
    for secret in ("oolong", "sencha", "Sam", key, "+1555", "5551234567"):
        assert secret not in raw


async def test_an_unwritable_audit_log_never_fails_the_write_it_describes(tmp_path: Path) -> None:
    (tmp_path / "blocked").write_text("a file where the directory should be")
    audit = AuditLog(tmp_path / "blocked" / "memory-audit.jsonl")
    await record(audit)
    assert await audit.prune() == 0 and audit.files() == []


class FailingStore(InMemoryProvider):
    """A store that takes reads but fails every write (a full disk, a dropped table)."""

    async def apply(self, owner_id, changes, context):  # type: ignore[no-untyped-def]
        raise OSError(28, "No space left on device")

    async def add_session_digest(self, owner_id, digest, retention_s, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError(28, "No space left on device")


async def test_a_digest_or_session_digest_write_that_fails_is_audited_as_failed(tmp_path: Path) -> None:
    import pytest

    from voicegate.internal.memory.records import SessionDigest

    audit = AuditLog(tmp_path / "audit.jsonl")
    runtime = FrontendMemoryRuntime(adapt(FailingStore(86400.0)), MemoryConfig(enabled=True), OwnerKeys(b"k" * 16),
                                    audit=audit)
    with pytest.raises(OSError):
        await runtime.set_document(OWNER, "memory", "- A call line.", ChangeContext("digest", "s1"))
    with pytest.raises(OSError):
        await runtime.add_session_digest(OWNER, SessionDigest("s1", ["billing"], "asked about billing"), 3600.0,
                                         ChangeContext("digest", "s1"))
    recorded = [(r["source"], r["operation"], r["outcome"], r["error"]) for r in lines(tmp_path / "audit.jsonl")]
    assert recorded == [("digest", "set", "failed", "OSError"), ("digest", "session_digest", "failed", "OSError")]
