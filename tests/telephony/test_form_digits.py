"""The guard that keeps a digit form's entry out of an MCP tool's arguments (form_digits.py): it sees the
entry however the model writes it: as numerals, as words, split by separators or across arguments, or
backwards."""

from __future__ import annotations

from typing import Any

import pytest

from voicegate.internal.conversation.form_digits import carries_entry, remember_entry
from voicegate.internal.conversation.slots import Slots

CARD = "4111111111111111"
PIN = "4729"


def slots_with(*entries: str) -> Slots:
    slots = Slots()
    for entry in entries:
        remember_entry(slots, entry)
    return slots


@pytest.mark.parametrize("arguments", [
    {"card": CARD},
    {"note": f"card {CARD[:4]}-{CARD[4:8]} {CARD[8:12]}.{CARD[12:]}"},
    {"card": "4111 1111 1111 1111"},
    {"card": "41-11-11-11-11-11-11-11"},
    {"card": "four one one one one one one one one one one one one one one one"},
    {"card": "Four, one, one, one; one one one one / one one one one - one one one one"},
    {"card": "forty one eleven eleven eleven eleven eleven eleven eleven"},
    {"card": "four double one triple one one one one one one one one one one one"},
    {"card": "4 one 1 one 1111 eleven eleven eleven eleven"},
    {"card": "".join(reversed(CARD))},
    {"card": "1111 1111 1111 1114"},
    {"card": "one one one one one one one one one one one one one one one four"},
    {"first": "4111 1111", "last": "1111 1111"},
    {"first": "4111", "rest": ["1111", {"x": "1111"}], "end": "1111"},
    {"last": "1111 1111", "first": "4111 1111"},
    {"card": "ＡＢ４１１１１１１１１１１１１１１１"},  # full-width digits
    {"card": f"{CARD[:8]} pound {CARD[8:]}"},
])
def test_the_card_is_found_however_it_is_written(arguments: dict[str, Any]) -> None:
    assert carries_entry(arguments, slots_with(CARD))


@pytest.mark.parametrize("arguments", [
    {"pin": "four seven two nine"},
    {"pin": "47 29"},
    {"pin": "nine two seven four"},
    {"a": "47", "b": "29"},
    {"pin": "forty seven twenty nine"},
    {"pin": "for seven to nine"},  # homophones a recogniser or a model may write
])
def test_a_pin_is_found_in_words_split_or_reversed(arguments: dict[str, Any]) -> None:
    assert carries_entry(arguments, slots_with(PIN))


@pytest.mark.parametrize("arguments", [
    {"order_id": "ZQ-4471"},
    {"query": "what is the balance for my account"},
    {"pin": "4728"},
    {"card": "4111 1111 1111 1112"},
    {},
])
def test_arguments_without_the_entry_pass(arguments: dict[str, Any]) -> None:
    assert not carries_entry(arguments, slots_with(CARD, PIN))


def test_nothing_is_guarded_without_an_entry_or_for_a_menu_choice() -> None:
    assert not carries_entry({"card": CARD}, None)
    assert not carries_entry({"card": CARD}, Slots())
    assert not carries_entry({"choice": "press 1"}, slots_with("1"))
