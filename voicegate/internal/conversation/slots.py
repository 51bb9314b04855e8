"""A call's per-feature values, typed: `Slots`, read and written with `Slot[T]` keys.

Many features keep something with a call for as long as it lasts, and a reconnect keeps it too: the SIP
Call-ID, the recording's consent, the answering-machine run, a transfer's state, the memory owner and
its erasure epoch, the ledger of what the agent did. The Session holds them (and the pipeline reaches
them through its CallContext), but it cannot name their types: the features that own them import the
session, so a field per feature on the Session would be an import circle.

So each owner declares its key beside its code, with the value's type, and the session holds one
`Slots` that knows no feature:

    AMD: Slot[AmdRun] = Slot("amd")           # internal/telephony/answering_machine.py
    run = session.slots.get(AMD)              # AmdRun | None, checked by mypy
    session.slots.set(AMD, AmdRun())

A key is its `Slot` object (the name is for reading a repr, never for looking a value up), so two
features cannot collide on a string, and a value is only ever read as the type it was declared with.
This module imports nothing of the project: every package can declare a key.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")
D = TypeVar("D")


class Slot(Generic[T]):
    """The key of one kind of per-call value; declare it once, at module level, in the owning package."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Slot({self.name!r})"


class Slots:
    """The values a call's features keep, each under its owner's Slot."""

    def __init__(self) -> None:
        self._values: dict[Slot[Any], Any] = {}

    @overload
    def get(self, slot: Slot[T]) -> T | None: ...

    @overload
    def get(self, slot: Slot[T], default: D) -> T | D: ...

    def get(self, slot: Slot[T], default: D | None = None) -> T | D | None:
        value: T | D | None = self._values.get(slot, default)
        return value

    def set(self, slot: Slot[T], value: T) -> None:
        self._values[slot] = value

    def setdefault(self, slot: Slot[T], default: T) -> T:
        """The slot's value, `default` stored first when it has none."""
        value: T = self._values.setdefault(slot, default)
        return value

    def pop(self, slot: Slot[T]) -> T | None:
        value: T | None = self._values.pop(slot, None)
        return value

    def clear(self) -> None:
        self._values.clear()

    def __contains__(self, slot: Slot[Any]) -> bool:
        return slot in self._values

    def __repr__(self) -> str:
        return f"Slots({', '.join(slot.name for slot in self._values)})"

