"""The hang-up outbox: what a call leaves to be written, kept on disk until it lands.

At hang-up the call's memory work (its digest line, reconciliation, its session digest) is reduced to a
small `HangupWrite` (a few hundred characters, or a bounded redacted transcript when a model step
needs one) and written to one file in `<data_dir>/memory-outbox/`, fsynced; the Session and its
transcript are released at once. A single worker lands the entries oldest first. When a step cannot
land (the store is unreachable) the whole outbox backs off, doubling up to `memory.write_retry_max_s`,
and then tries the oldest entry that is not waiting out a back-off of its own: an outage costs one
attempt (and one log line) per back-off, not one per pending call, and an entry that keeps failing
while others land waits longer each time instead of holding the others up. A step the store refuses
for what it holds (bad data, not a lost connection: `transient`) is dropped at once, logged and
audited, never retried. An entry older than `memory.outbox_max_age_h` is dropped (logged). So an
outage costs disk, not memory; a restart picks the files up again; shutdown drains what can land
before the store's clients close; and `describe()` (in /health) says when writes have stopped
landing.

An entry carries the erasure epoch its call started with: when the caller is erased meanwhile, the
provider refuses it and the file is deleted. Files are named by owner key (an HMAC), so
`voicegate memory delete` on the same data directory removes them too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from voicegate.internal.memory.digest import no_longer_stated
from voicegate.internal.memory.durable import write_atomically
from voicegate.internal.memory.provider import MemoryDocument, OwnerErased

log = logging.getLogger(__name__)

OUTBOX_DIR = "memory-outbox"
FIRST_RETRY_S = 0.5
STUCK_AFTER = 3  # attempts in a row that could not land before /health calls the outbox stuck
TRANSCRIPT_CHARS = 8000  # what a model step (reconciliation, session digest) may see of a call
SAID_LINES = 20  # caller lines kept for the keyword session digest


class StepFailed(Exception):
    """A step could not land now and should be tried again later (the store is unreachable)."""


class StepRejected(Exception):
    """The store refused a step's write for what it holds, not for where it is: trying it again cannot
    land it, so the step is dropped (logged and audited) and the entry's other steps go on."""


def transient(exc: BaseException) -> bool:
    """Whether a write failed because the store could not be reached (try again later) rather than
    because of what it was asked to store (never lands). Judged on the whole chain of causes: a wrapper
    such as MemoryUnavailable keeps the database's error as its context."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 8:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for error in chain:
        verdict = _database_verdict(error)
        if verdict is not None:
            return verdict
    return any(isinstance(error, OSError | TimeoutError | ConnectionError) for error in chain) or any(
        type(error).__name__ in ("MemoryUnavailable", "StepFailed") for error in chain)


def _database_verdict(error: BaseException) -> bool | None:
    """psycopg: a lost or refused connection, a timeout, a deadlock is transient; bad data, a broken
    constraint or statement is not. httpx (a provider over HTTP): transport errors, 429 and 5xx are."""
    if isinstance(error, psycopg.Error):
        return isinstance(error, psycopg.OperationalError | psycopg.InterfaceError)
    if isinstance(error, httpx.HTTPStatusError):
        return error.response.status_code == 429 or error.response.status_code >= 500
    if isinstance(error, httpx.TransportError):
        return True
    return None


@dataclass(slots=True)
class HangupWrite:
    """What one ended call still has to write: bounded, no Session, no audio."""

    owner: str
    session_id: str
    transport: str
    epoch: int
    steps: list[str]
    summary: str = ""  # the digest line (already redacted)
    transcript: str = ""  # redacted and bounded; only when a model step needs it
    said: list[str] = field(default_factory=list)  # the caller's first lines (redacted), for keyword digests
    summarise: bool = False  # the digest line is to be written by the summary model from `transcript`
    forgotten: list[str] = field(default_factory=list)  # words of facts removed in the call: not restated
    # The fact lines of `memory` the call saw (bounded): a fact among them that is gone when a step lands
    # was removed by someone else (the API, another node, the CLI) and is not restated either.
    seen: list[str] = field(default_factory=list)
    # What the agent did (internal/conversation/actions.py, at most MAX_ACTIONS small entries), for the session
    # digest; an entry written before this field existed has none.
    actions: list[dict[str, str]] = field(default_factory=list)
    created_at: float = field(default_factory=time.time)
    attempts: int = 0
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])

    def forgotten_against(self, memory: MemoryDocument) -> set[str]:
        """Every word this call must not restate, judged against the `memory` document as it is now: what
        the call itself removed, and what it saw that is no longer there (digest.no_longer_stated)."""
        return set(self.forgotten) | no_longer_stated(self.seen, memory.content, memory.format)

    def file_name(self) -> str:
        return f"{self.owner}-{int(self.created_at * 1000):015d}-{self.id}.json"

    @staticmethod
    def from_json(text: str) -> HangupWrite:
        data: dict[str, Any] = json.loads(text)
        return HangupWrite(**{key: data[key] for key in HangupWrite.__dataclass_fields__ if key in data})


Step = Callable[[HangupWrite], Awaitable[None]]


def retry_delay(attempts: int, cap_s: float) -> float:
    """Back-off before the next try: doubling from FIRST_RETRY_S, never above `cap_s`."""
    return float(min(cap_s, FIRST_RETRY_S * (2 ** max(0, attempts - 1))))


def _created(name: str) -> str:
    """The creation time in an entry's file name (`<owner>-<ms>-<id>.json`), sortable as text."""
    return name.split("-")[1]


def owner_files(directory: Path, owner: str) -> list[Path]:
    """An owner's pending entries in an outbox directory (for erasure and export)."""
    return sorted(directory.glob(f"{owner}-*.json")) if directory.exists() else []


class HangupOutbox:
    def __init__(self, directory: Path, *, retry_max_s: float, max_age_s: float, max_entries: int,
                 clock: Callable[[], float] = time.time) -> None:
        self.directory = directory
        self._retry_max_s = retry_max_s
        self._max_age_s = max_age_s
        self._max_entries = max_entries
        self._clock = clock
        self._steps: dict[str, Step] = {}
        # Names of the entries on disk not landed yet (the entries stay on disk until worked on). When
        # one is tried is the outbox's back-off, not the entry's: see _paused_until.
        self._pending: set[str] = set()
        self._not_before: dict[str, float] = {}  # an entry's own back-off (it failed while others may land)
        # The order entries arrived in, to break ties between names created in the same millisecond.
        self._arrival: dict[str, int] = {}
        self._arrivals = itertools.count()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._busy = False
        self._failures = 0  # consecutive attempts that could not land: the store's back-off
        self._failing_since: float | None = None  # when that run of failures began
        self._paused_until = 0.0
        self.landed = 0
        self.dropped = 0
        self.rejected = 0  # steps the store refused for their content: dropped, never retried
        self.failed_attempts = 0  # attempts that could not land, in all
        # Told (entry, step, reason) when a step is rejected: the memory runtime audits it.
        self.on_rejected: Callable[[HangupWrite, str, str], Awaitable[None]] | None = None

    def add_step(self, name: str, step: Step) -> None:
        """Register how a step is carried out; a step raises StepFailed to be retried later,
        OwnerErased to drop the entry, anything else is logged and the step skipped."""
        self._steps[name] = step

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def stuck(self) -> bool:
        """Writes have stopped landing: STUCK_AFTER attempts in a row failed."""
        return self._failures >= STUCK_AFTER

    def describe(self) -> dict[str, Any]:
        """For /health: counts only, never what an entry holds."""
        now = self._clock()
        oldest = min((int(_created(name)) / 1000.0 for name in self._pending), default=None)
        return {"pending": len(self._pending), "stuck": self.stuck, "failing_attempts": self._failures,
                "failing_for_s": round(now - self._failing_since, 1) if self._failing_since is not None else 0.0,
                "oldest_pending_s": round(now - oldest, 1) if oldest is not None else 0.0,
                "landed": self.landed, "dropped": self.dropped, "rejected": self.rejected}

    # ---- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Pick up what an earlier run left, then work in the background."""
        names = await asyncio.to_thread(self._scan)
        for name in names:
            self._arrived(name)
        if names:
            log.info("memory outbox: pending hang-up writes from an earlier run", extra={"pending": len(names)})
        self._task = asyncio.create_task(self._run(), name="memory-outbox")

    def _scan(self) -> list[str]:
        self.directory.mkdir(parents=True, exist_ok=True)
        for stale in self.directory.glob(".*.json.*"):  # a write cut short by a crash
            stale.unlink(missing_ok=True)
        return sorted(p.name for p in self.directory.glob("*.json"))

    async def put(self, entry: HangupWrite) -> None:
        """Keep `entry` on disk and wake the worker (bounded: the oldest entries go first when full)."""
        name = entry.file_name()
        await asyncio.to_thread(self._store, entry, name)
        self._arrived(name)
        while len(self._pending) > self._max_entries:
            oldest = min(self._pending, key=self._age)
            self._discard(oldest)
            await asyncio.to_thread(self._remove, oldest)
            self.dropped += 1
            log.warning("memory outbox full; the oldest hang-up write was dropped",
                        extra={"max_entries": self._max_entries})
        self._wake.set()

    def _arrived(self, name: str) -> None:
        self._pending.add(name)
        self._arrival.setdefault(name, next(self._arrivals))

    def _discard(self, name: str) -> None:
        self._pending.discard(name)
        self._arrival.pop(name, None)

    def _age(self, name: str) -> tuple[str, int]:
        """Oldest first: the creation millisecond in the name, then the order the entries arrived in."""
        return _created(name), self._arrival.get(name, 0)

    def _store(self, entry: HangupWrite, name: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomically(self.directory / name, json.dumps(asdict(entry), ensure_ascii=False))

    async def _keep(self, entry: HangupWrite, name: str) -> bool:
        """Write the worker's progress back, unless `put` dropped the entry for room meanwhile (before
        or while this wrote): a dropped entry never comes back to disk. False when it was dropped."""
        if name in self._pending:
            await asyncio.to_thread(self._store, entry, name)
            if name in self._pending:
                return True
            await asyncio.to_thread(self._remove, name)
        self._not_before.pop(name, None)
        return False

    def _remove(self, name: str) -> None:
        (self.directory / name).unlink(missing_ok=True)

    async def drain(self, timeout_s: float) -> bool:
        """At shutdown (and in tests): try what is pending now, whatever the back-off, and keep trying
        for at most `timeout_s`; True when nothing is left."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        self._paused_until = 0.0
        self._not_before.clear()
        self._wake.set()
        while (self._busy or self._pending) and asyncio.get_running_loop().time() < deadline:
            if self._task is None or self._task.done():
                break
            await asyncio.sleep(0.005)
        return not self._pending

    async def stop(self, timeout_s: float) -> None:
        """Drain, then stop the worker; entries that did not land stay on disk for the next start."""
        await self.drain(timeout_s)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._pending:
            log.warning("memory outbox: hang-up writes left for the next start",
                        extra={"pending": len(self._pending)})

    # ---- the worker ----------------------------------------------------------------------------

    def _next(self, now: float) -> tuple[str | None, float]:
        """The oldest entry not waiting out its own back-off, else how long until one is due."""
        due = [name for name in self._pending if self._not_before.get(name, 0.0) <= now]
        if due:
            return min(due, key=self._age), 0.0  # oldest first, whoever the owner
        return None, min((self._not_before[name] for name in self._pending), default=now) - now

    async def _run(self) -> None:
        while True:
            now = self._clock()
            paused_s = self._paused_until - now
            name, wait_s = self._next(now) if self._pending and paused_s <= 0 else (None, paused_s)
            if name is None:
                self._wake.clear()  # woken by put() and drain(); or when the back-off is over
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, wait_s) if self._pending else None):
                        await self._wake.wait()
                continue
            self._busy = True
            try:
                await self._work(name)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug in a step must not stop the outbox
                log.exception("memory outbox: an entry failed unexpectedly; it is dropped")
                self._forget(name)
            finally:
                self._busy = False

    def _forget(self, name: str) -> None:
        self._discard(name)
        self._not_before.pop(name, None)
        self._remove(name)

    async def _work(self, name: str) -> None:
        try:
            text = await asyncio.to_thread((self.directory / name).read_text, encoding="utf-8")
            entry = HangupWrite.from_json(text)
        except FileNotFoundError:  # erased by `voicegate memory delete` meanwhile
            self._discard(name)
            return
        except (ValueError, TypeError):
            log.warning("memory outbox: an unreadable entry was dropped")
            self._forget(name)
            return
        if self._clock() - entry.created_at > self._max_age_s:
            log.warning("memory outbox: a hang-up write older than memory.outbox_max_age_h was dropped",
                        extra={"attempts": entry.attempts, "steps": entry.steps})
            self.dropped += 1
            self._forget(name)
            return
        while entry.steps:
            step = self._steps.get(entry.steps[0])
            try:
                if step is None:
                    log.warning("memory outbox: no handler for step %s; skipped", entry.steps[0])
                else:
                    await step(entry)
            except OwnerErased:
                log.info("memory outbox: the caller was erased; this call's writes are dropped")
                self._forget(name)
                return
            except StepFailed as exc:
                entry.attempts += 1
                self._failures += 1
                self.failed_attempts += 1
                if self._failing_since is None:
                    self._failing_since = self._clock()
                delay = retry_delay(self._failures, self._retry_max_s)
                log.warning("memory %s write failed, retrying in %.1f s (%d pending): %s", entry.steps[0], delay,
                            len(self._pending), exc)
                self._paused_until = self._clock() + delay
                if not await self._keep(entry, name):
                    return
                # Its own back-off grows with its own attempts and outlasts the outbox's: the next try is
                # another entry's, whose landing tells an outage from one entry that cannot land.
                self._not_before[name] = self._clock() + retry_delay(entry.attempts + 1, 2 * self._retry_max_s)
                return
            except StepRejected as exc:
                self.rejected += 1
                log.error("memory outbox: the store refused the %s write of a call (%s); it is dropped, "
                          "not retried", entry.steps[0], exc)
                if self.on_rejected is not None:
                    try:
                        await self.on_rejected(entry, entry.steps[0], str(exc))
                    except Exception:
                        log.exception("memory outbox: could not audit a refused write")
            except Exception:
                log.exception("memory outbox: step %s failed; skipped", entry.steps[0])
            self._failures, self._failing_since = 0, None
            entry.steps.pop(0)
            if entry.steps and not await self._keep(entry, name):
                return
        self.landed += 1
        self._forget(name)
