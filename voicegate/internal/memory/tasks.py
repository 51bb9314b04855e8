"""The task ledger: the live status of work the agent dispatched for a caller (seed 004).

A session digest freezes the *objective* of dispatched work (which tool, which transfer target, its
task id), never its status: a stored status silently becomes wrong within days. The status lives here,
one small entry per task, updated as the work moves on, and `recall` reads it at the time of the
question:

- a side-effect tool's run (ok or error at once), a transfer (requested, then succeeded, failed, or
  ended when the call ended before its outcome: nobody can learn it after that), and work a tool only
  started (`starts_work`: started, running, then succeeded, failed or cancelled), told by the tool
  through `CallTasks` during or after the call, or asked of its status function at recall time;
- an entry carries the task id, kind, the deployer's name of the tool or target, the status and its
  times: never a tool's arguments or result, never anything the caller said;
- terminal entries are kept `memory.task_terminal_days` (3) after they finished; an open one lives as
  long as the caller's memory (`retention_days`); at most `memory.max_tasks` per caller, oldest first;
- work whose entry is gone (older than that, or from before the ledger) is reported as `dispatched`,
  without a status;
- entries are erased (and exported) with the caller, and every write carries the call's erasure epoch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from voicegate.internal.conversation.actions import NAME_CHARS, TERMINAL, Action, valid_status
from voicegate.internal.memory.errors import UNKNOWN_EPOCH, CallerErased, MemoryRuntimeError

log = logging.getLogger(__name__)

DISPATCHED = "dispatched"  # recall's word for work whose status is no longer (or never was) known
STATUS_TIMEOUT_S = 2.0  # a tool's status function answers within this, or the ledger's entry stands
# A tool's status function: the status of the task it started, by task id (None: no news).
StatusFunction = Callable[[str], Awaitable[str | None]]


@dataclass(frozen=True, slots=True)
class TaskEntry:
    task_id: str
    kind: str  # "tool" or "transfer"
    name: str  # the tool's or the transfer target's name: the deployer's, never the caller's
    status: str
    session_id: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


def entry_of(action: Action, session_id: str) -> TaskEntry | None:
    """The ledger entry of a call's action (internal/conversation/actions.py), or None when it has no task."""
    kind, task, status = action.get("action", ""), action.get("task"), action.get("status")
    name = action.get("name") or action.get("target")
    if not task or not name or not valid_status(kind, status):
        return None
    return TaskEntry(task, kind, name[:NAME_CHARS], str(status), session_id)


class CallTasks:
    """What a tool that starts work keeps (ToolContext.extras["tasks"]) to tell the ledger how the work
    goes, during the call or long after it: bound to the call's caller and erasure epoch."""

    def __init__(self, runtime: Any, owner: str, epoch: int, session_id: str) -> None:
        self._runtime, self._owner, self._epoch, self._session_id = runtime, owner, epoch, session_id

    async def update(self, task_id: str, status: str, *, name: str, kind: str = "tool") -> bool:
        """Record `status` for the task; False when it could not be (an unknown status, the caller
        erased since, the store down)."""
        if not valid_status(kind, status) or self._epoch == UNKNOWN_EPOCH:
            return False
        try:
            await self._runtime.record_task(self._owner, TaskEntry(task_id, kind, name[:NAME_CHARS], status,
                                                                   self._session_id), self._epoch)
        except (CallerErased, MemoryRuntimeError) as exc:
            log.info("a task's status was not recorded: %s", type(exc).__name__)
            return False
        return True


class LedgerWriter:
    """A live call's changes to its actions, written to the ledger in the order they happened."""

    def __init__(self, runtime: Any, owner: str, epoch: int, session_id: str) -> None:
        self._runtime, self._owner, self._epoch, self._session_id = runtime, owner, epoch, session_id
        self._lock = asyncio.Lock()  # FIFO: a later status never lands before an earlier one
        self._writes: set[asyncio.Task[None]] = set()

    def told(self, action: Action) -> None:
        """actions.ON_CHANGE: synchronous, the write goes on in the background."""
        entry = entry_of(action, self._session_id)
        if entry is None:
            return
        task = asyncio.create_task(self._write(entry), name="memory-task-ledger")
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write(self, entry: TaskEntry) -> None:
        async with self._lock:
            try:
                await self._runtime.record_task(self._owner, entry, self._epoch)
            except Exception as exc:  # the ledger is a note about the call, never a reason to fail it
                log.warning("task ledger write failed: %s", type(exc).__name__)

    async def settle(self, actions: list[Action], timeout_s: float) -> None:
        """At hang-up: transfers still waiting for their outcome never learn it now (`ended`); then wait
        for the writes in flight."""
        for action in actions:
            if action.get("action") == "transfer" and action.get("status") == "requested":
                self.told({**action, "status": "ended"})
        if self._writes:
            await asyncio.wait(list(self._writes), timeout=timeout_s)


async def live_actions(runtime: Any, owner: str, actions: list[Action],
                       status_of: Callable[[str], StatusFunction | None] = lambda name: None,
                       epoch: int | None = None) -> list[Action]:
    """What recall says of a call's actions: each with its status as the ledger has it now (asking a
    tool that started work for news of an open task first), or `dispatched` when the ledger no longer
    knows it. Never a status the digest froze."""
    tasks = [action["task"] for action in actions if action.get("task")]
    known: dict[str, TaskEntry] = await runtime.tasks(owner, tasks) if tasks else {}
    answered: list[Action] = []
    for action in actions:
        entry = known.get(action.get("task", ""))
        if entry is not None and not entry.terminal and entry.kind == "tool":
            entry = await _ask(runtime, owner, entry, status_of(entry.name), epoch)
        shown = {key: value for key, value in action.items() if key not in ("status", "task")}
        shown["status"] = entry.status if entry is not None else DISPATCHED
        if entry is not None:
            shown["updated"] = time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.updated_at))
        answered.append(shown)
    return answered


async def _ask(runtime: Any, owner: str, entry: TaskEntry, status: StatusFunction | None,
               epoch: int | None) -> TaskEntry:
    """An open task's status from the tool that started it, recorded when it changed."""
    if status is None:
        return entry
    try:
        async with asyncio.timeout(STATUS_TIMEOUT_S):
            now = await status(entry.task_id)
    except Exception as exc:  # a status function that fails or hangs leaves the ledger's answer
        log.info("a tool's status function failed: %s", type(exc).__name__)
        return entry
    if now is None or now == entry.status or not valid_status(entry.kind, now):
        return entry
    updated = TaskEntry(entry.task_id, entry.kind, entry.name, now, entry.session_id, entry.created_at, time.time())
    try:
        await runtime.record_task(owner, updated, epoch)
    except Exception as exc:
        log.info("a task's new status was not recorded: %s", type(exc).__name__)
    return updated
