"""What the offline local agent understands, as a list a person can read: an intent and a phrase that
triggers it.

The page shows this list when the local agent is the configured model, so it must stay true: each example
is a phrase the agent's own patterns (internal/llm/local.py) map to its intent, and a test runs every
example through them. An intent that needs something this server does not have (memory off, no transfer
targets) is listed as unavailable, or not at all, rather than promised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

# What an intent needs beyond the agent: "memory" = [memory] enabled and a signed-in (verified) caller,
# since anonymous callers get no memory; "phone" = a SIP call (transfer is REFER, a browser has no leg
# to hand on).
Needs = Literal["", "memory", "phone"]


@dataclass(frozen=True, slots=True)
class Capability:
    intent: str
    example: str
    needs: Needs = ""
    available: bool = True

    def as_json(self) -> dict[str, object]:
        return asdict(self)


# (intent, example, needs), in the order a newcomer would try them. The intent names are the agent's own
# (`classify` and `memory_writes` in local.py).
_EVERYDAY: list[tuple[str, str, Needs]] = [
    ("time", "What time is it?", ""),
    ("date", "What day is it?", ""),
    ("repeat", "Repeat after me: the parcel arrived on Monday.", ""),
    ("who", "What can you do?", ""),
    ("greeting", "Hello!", ""),
]
_MEMORY: list[tuple[str, str, Needs]] = [
    ("name", "My name is Sam.", "memory"),
    ("remember", "Remember that I like green tea.", "memory"),
    ("short", "Keep your answers short.", "memory"),
    ("recall", "What do you remember about me?", "memory"),
    ("forget", "Forget that I like green tea.", "memory"),
]
_CLOSING: list[tuple[str, str, Needs]] = [
    ("goodbye", "Goodbye.", ""),
]


def local_capabilities(*, memory_enabled: bool, transfer_targets: Sequence[str]) -> list[Capability]:
    """The intents the local agent acts on with this configuration, each with an example phrase.

    Memory intents are listed even with memory off (marked unavailable): the agent still answers them,
    honestly saying it cannot keep anything, and the list tells the reader what turning memory on adds.
    Transfer appears only when `sip.transfer_targets` names somewhere to transfer to, with the first name.
    """
    found = [Capability(intent, example, needs) for intent, example, needs in _EVERYDAY]
    found += [Capability(intent, example, needs, available=memory_enabled) for intent, example, needs in _MEMORY]
    if transfer_targets:
        found.append(Capability("transfer", f"Put me through to {transfer_targets[0]}.", "phone"))
    found += [Capability(intent, example, needs) for intent, example, needs in _CLOSING]
    return found
