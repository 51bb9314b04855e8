"""A call's typed slots (internal/conversation/slots.py): each feature's value under its own key."""

from __future__ import annotations

from voicegate.internal.conversation.slots import Slot, Slots

OWNER: Slot[str] = Slot("memory.owner")
ATTEMPTS: Slot[list[int]] = Slot("attempts")


def test_a_value_is_found_only_under_the_key_that_stored_it() -> None:
    slots = Slots()
    slots.set(OWNER, "abc")
    same_name: Slot[str] = Slot("memory.owner")  # another feature's key: a name is no key
    assert slots.get(OWNER) == "abc" and OWNER in slots
    assert slots.get(same_name) is None and same_name not in slots


def test_an_absent_slot_reads_as_none_or_the_default_and_pops_as_none() -> None:
    slots = Slots()
    assert slots.get(OWNER) is None and slots.get(OWNER, "") == ""
    assert slots.pop(OWNER) is None
    slots.setdefault(ATTEMPTS, []).append(1)
    slots.setdefault(ATTEMPTS, []).append(2)
    assert slots.pop(ATTEMPTS) == [1, 2] and ATTEMPTS not in slots

