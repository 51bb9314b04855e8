"""Digits from the recogniser's words, however it writes them."""

from __future__ import annotations

import pytest

from voicegate.internal.conversation.spoken_digits import SpokenDigits, spoken_digits


@pytest.mark.parametrize(("text", "digits"), [
    ("five five five one two", "55512"),
    ("5551 2", "55512"),
    ("55512.", "55512"),
    ("555-12", "55512"),
    ("5, 5, 5, 1, 2", "55512"),
    ("My account number is five five five one two.", "55512"),
    ("double oh seven", "007"),
    ("triple five, one two", "555 12".replace(" ", "")),
    ("twenty one fifty five", "2155"),
    ("twenty", "20"),
    ("one hundred", "100"),
    ("four two star one", "42*1"),
    ("Nineteen eighty four", "1984"),
    ("It's 4, 2, 7, 9, 8, 1.", "427981"),
    ("um let me see", ""),
])
def test_spoken_forms_become_the_keys_they_stand_for(text: str, digits: str) -> None:
    assert spoken_digits(text).digits == digits


def test_the_terminator_word_ends_the_entry_and_is_no_digit() -> None:
    assert spoken_digits("one two three hash") == SpokenDigits("123", True)
    assert spoken_digits("one two three pound four") == SpokenDigits("123", True)
    assert spoken_digits("1 2 3 #") == SpokenDigits("123", True)
    assert not spoken_digits("nothing to see here")


def test_homophones_count_only_when_asked_for() -> None:
    assert spoken_digits("I want to pay for it").digits == ""
    assert spoken_digits("won to free", homophones=True).digits == "123"
