"""What the agent did on a call: a small ledger kept in the session's slots while the call lasts.

It answers a later "what did you do for me last time": an entry says what kind of action it was, which
tool ran or which transfer target (a name from the deployer's allow-list) was asked for, its task id
and its status. Never a tool's arguments or its result: they could hold anything the caller said, and
the ledger outlives the call. Status is live (seed 004): each change is told to `ON_CHANGE` (the memory
side keeps it in the caller's task ledger, internal/memory/tasks.py, where it can still move after the
call), and what a session digest keeps is only the objective (`objective`: kind, name, task id).

The pipeline records tool runs (internal/pipeline/responder.py), the SIP side records transfers
(internal/sip/voice/transfer.py); this module imports nothing of either, so both and memory can use it.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any, Protocol

from voicegate.internal.conversation.slots import Slot, Slots


class TaskReports(Protocol):
    """How a tool that starts work reports its task's status later (memory.tasks.CallTasks)."""

    async def update(self, task_id: str, status: str, *, name: str, kind: str = "tool") -> bool: ...


Action = dict[str, str]
ACTIONS: Slot[list[Action]] = Slot("session.actions")  # the call's ledger
ON_CHANGE: Slot[Callable[[Action], None]] = Slot("session.actions.on_change")  # told every new or changed entry
CALL_TASKS: Slot[TaskReports] = Slot("session.tasks")  # the handle a tool that starts work keeps
TASK_CHARS = 32  # a task id: random hex made here, never the caller's
MAX_ACTIONS = 10  # per call: the latest are kept, a call that ran a tool in a loop is still one small row
NAME_CHARS = 64  # a tool or target name is the deployer's, never the caller's, but bound it anyway

# The kinds of action, the key naming what was acted on, and the statuses each may end in.
_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    # ok/error: a tool that did its work while it ran. A tool that starts work elsewhere (`starts_work`)
    # is "started", may report "running", and ends "succeeded", "failed" or "cancelled".
    "tool": ("name", ("ok", "error", "started", "running", "succeeded", "failed", "cancelled")),
    # "requested": the transfer was asked for and its outcome has not arrived; "ended": the call ended
    # before it did (the ledger settles it so at hang-up: nobody can learn it any more).
    "transfer": ("target", ("requested", "succeeded", "failed", "ended")),
}
TERMINAL = frozenset({"ok", "error", "succeeded", "failed", "cancelled", "ended"})

log = logging.getLogger(__name__)


def new_task_id() -> str:
    return secrets.token_hex(8)


def tool_action(name: str, ok: bool, task: str | None = None, *, started: bool = False) -> Action:
    status = ("started" if started else "ok") if ok else "error"
    return {"action": "tool", "name": name[:NAME_CHARS], "status": status, "task": task or new_task_id()}


def transfer_action(target: str) -> Action:
    return {"action": "transfer", "target": target[:NAME_CHARS], "status": "requested", "task": new_task_id()}


def record_action(slots: Slots, action: Action) -> None:
    """Add `action` to the call's ledger in `slots` (a session's), keeping the latest MAX_ACTIONS."""
    ledger = slots.setdefault(ACTIONS, [])
    action.setdefault("task", new_task_id())
    ledger.append(action)
    del ledger[:-MAX_ACTIONS]
    _told(slots, action)


def settle_transfer(slots: Slots, target: str, status: str) -> None:
    """The outcome of the latest transfer to `target` still waiting for one."""
    ledger = slots.get(ACTIONS) or []
    for action in reversed(ledger):
        if action.get("action") == "transfer" and action.get("target") == target[:NAME_CHARS] \
                and action.get("status") == "requested":
            action["status"] = status
            _told(slots, action)
            return


def _told(slots: Slots, action: Action) -> None:
    hook = slots.get(ON_CHANGE)
    if hook is not None:
        try:
            hook(dict(action))
        except Exception:  # the task ledger is a note about the call, never a reason to fail it
            log.warning("could not tell the task ledger of an action", exc_info=True)


def objective(action: Action) -> Action:
    """What a session digest keeps of an action: what was dispatched, never its (live) status."""
    return {key: value for key, value in action.items() if key != "status"}


def call_actions(value: Any) -> list[Action]:
    """The well-formed entries of a ledger, copied and bounded: from a session, an outbox entry written
    by an older version, or a store. Anything else (other keys, other statuses, text) is dropped; the
    status may be absent (a session digest keeps only the objective)."""
    found: list[Action] = []
    for item in value[-MAX_ACTIONS:] if isinstance(value, list) else []:
        if not isinstance(item, dict) or item.get("action") not in _KINDS:
            continue
        key, statuses = _KINDS[item["action"]]
        name, status, task = item.get(key), item.get("status"), item.get("task")
        if not isinstance(name, str) or not name.strip() or (status is not None and status not in statuses):
            continue
        action = {"action": item["action"], key: name[:NAME_CHARS]}
        if status is not None:
            action["status"] = status
        if isinstance(task, str) and task.isalnum() and len(task) <= TASK_CHARS:
            action["task"] = task
        found.append(action)
    return found


def valid_status(kind: str, status: Any) -> bool:
    return kind in _KINDS and status in _KINDS[kind][1]
