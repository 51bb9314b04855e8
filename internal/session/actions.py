"""What the agent did on a call: a small ledger kept in `session.data` while the call lasts.

It answers a later "what did you do for me last time": an entry says what kind of action it was, which
tool ran or which transfer target (a name from the deployer's allow-list) was asked for, and how it
ended. Never a tool's arguments or its result: they could hold anything the caller said, and the
ledger outlives the call. At hang-up the memory side stores it with the call's session digest, when
session digests are kept (internal/memory/sessions.py); otherwise it goes with the session.

The pipeline records tool runs (internal/pipeline/responder.py), the SIP side records transfers
(internal/sip/voice_transfer.py); this module imports nothing of either, so both and memory can use it.
"""

from __future__ import annotations

from typing import Any

ACTIONS = "session.actions"  # the session.data key of the call's ledger
MAX_ACTIONS = 10  # per call: the latest are kept, a call that ran a tool in a loop is still one small row
NAME_CHARS = 64  # a tool or target name is the deployer's, never the caller's, but bound it anyway

# The kinds of action, the key naming what was acted on, and the statuses each may end in.
_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "tool": ("name", ("ok", "error")),
    # "requested": the transfer was asked for and its outcome never arrived (the call ended first).
    "transfer": ("target", ("requested", "succeeded", "failed", "ended")),
}

Action = dict[str, str]


def tool_action(name: str, ok: bool) -> Action:
    return {"action": "tool", "name": name[:NAME_CHARS], "status": "ok" if ok else "error"}


def transfer_action(target: str) -> Action:
    return {"action": "transfer", "target": target[:NAME_CHARS], "status": "requested"}


def record_action(data: dict[str, Any], action: Action) -> None:
    """Add `action` to the call's ledger in `data` (a session's data), keeping the latest MAX_ACTIONS."""
    ledger = data.get(ACTIONS)
    if not isinstance(ledger, list):
        ledger = data[ACTIONS] = []
    ledger.append(action)
    del ledger[:-MAX_ACTIONS]


def settle_transfer(data: dict[str, Any], target: str, status: str) -> None:
    """The outcome of the latest transfer to `target` still waiting for one."""
    for action in reversed(data.get(ACTIONS) or []):
        if action.get("action") == "transfer" and action.get("target") == target[:NAME_CHARS] \
                and action.get("status") == "requested":
            action["status"] = status
            return


def call_actions(value: Any) -> list[Action]:
    """The well-formed entries of a ledger, copied and bounded: from a session, an outbox entry written
    by an older version, or a store. Anything else (other keys, other statuses, text) is dropped."""
    found: list[Action] = []
    for item in value[-MAX_ACTIONS:] if isinstance(value, list) else []:
        if not isinstance(item, dict) or item.get("action") not in _KINDS:
            continue
        key, statuses = _KINDS[item["action"]]
        name, status = item.get(key), item.get("status")
        if isinstance(name, str) and name.strip() and status in statuses:
            found.append({"action": item["action"], key: name[:NAME_CHARS], "status": status})
    return found
