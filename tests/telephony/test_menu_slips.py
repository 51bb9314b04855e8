"""Reading a menu that the recogniser got partly wrong: one unreadable clause costs its own
option and no other, a menu heard twice is read from both hearings, and a prompt in another language is
not read as English options."""

from __future__ import annotations

import functools

import pytest

from voicegate.internal.telephony.menu import MenuOption, classify_prompt, merge_hearings, other_language, parse_menu
from voicegate.internal.telephony.menu_choice import GoalMatcher, WordLlamaSimilarity
from voicegate.internal.telephony.navigator import MenuNavigator, Press, Stop, Wait

MAIN = "For sales, press 1. For billing, press 2. For technical support, press 3."


@functools.cache
def similarity() -> WordLlamaSimilarity:
    return WordLlamaSimilarity()


@pytest.mark.parametrize(("prompt", "options"), [
    # label first: the last option's key in another language (it read as "for ..." after the last key)
    ("For sales, press 1. For billing, press 2. For technical support, oprima tres.",
     [MenuOption("sales", "1"), MenuOption("billing", "2")]),
    # label first: a line in Spanish in the middle, and a keyless last line that starts with "for"
    ("For sales, press 1. Para facturación, oprima dos. For support, press 3. For anything else, stay on the line.",
     [MenuOption("sales", "1"), MenuOption("support", "3")]),
    # ... as Whisper wrote it from the menu server's call (tests/sip_calls/test_menus.py): commas only
    ("Thank you for calling Northwest Energy. For sales, press one, for billing, press two, for technical support, "
     "upper mattress.", [MenuOption("sales", "1"), MenuOption("billing", "2")]),
    # ... and as Whisper base wrote it on another machine: the welcome run into the first option, whose
    # "for" leads it; the last key lost as "opera mattress"
    ("Thank you for calling Northwind Energy for sales, press one, for billing, press two, for technical support, "
     "opera mattress.", [MenuOption("sales", "1"), MenuOption("billing", "2")]),
    ("Thank you for calling Northwind Energy for sales, press one, for billing, press two, for technical support, "
     "press three.", [MenuOption("sales", "1"), MenuOption("billing", "2"), MenuOption("technical support", "3")]),
    # a welcome's own "for" and "to" lead no option when the keys come first
    ("Thank you for calling Acme, press 1 for sales, press 2 for billing.",
     [MenuOption("sales", "1"), MenuOption("billing", "2")]),
    ("Welcome to Acme press 1 for sales press 2 for billing", [MenuOption("sales", "1"), MenuOption("billing", "2")]),
    ("For sales, press, 1. For billing, press. 2.", [MenuOption("sales", "1"), MenuOption("billing", "2")]),
    # Whisper starts sentences at the key in a label-first menu: the key that ends the prompt says which way
    ("Department to hear your balance. Press one to speak with a billing representative. Press two.",
     [MenuOption("hear your balance", "1"), MenuOption("speak with a billing representative", "2")]),
    ("Press 1 for sales. Press 2 for billing. Press 3.",
     [MenuOption("sales", "1"), MenuOption("billing", "2"), MenuOption("", "3")]),
    # label first, no punctuation (a streaming recogniser): the lost key ends its clause
    ("for sales press 1 for billing presto for technical support press 3 for returns press 4",
     [MenuOption("sales", "1"), MenuOption("technical support", "3"), MenuOption("returns", "4")]),
    # key first after a welcome: the middle key misheard, the last label without its "for"
    ("Welcome to Acme. Press 1 for sales. Prez two four billing. Press 3 for support. Press 4, returns and exchanges.",
     [MenuOption("sales", "1"), MenuOption("support", "3"), MenuOption("returns and exchanges", "4")]),
    # key first, no punctuation
    ("press 1 for sales presto for billing press 3 for support",
     [MenuOption("sales", "1"), MenuOption("support", "3")]),
    # an English menu with one line for Spanish speakers: the English options stand
    ("For sales, press 1. For billing, press 2. Para español, oprima nueve.",
     [MenuOption("sales", "1"), MenuOption("billing", "2")]),
    # and what read right before still does: a "press" that is a noun; a label that ends in "or"
    ("Press 4 for the press office. Press 1 for sales.",
     [MenuOption("the press office", "4"), MenuOption("sales", "1")]),
    ("Say agent to speak to someone, or press 9.", [MenuOption("speak to someone", word="agent"), MenuOption("", "9")]),
])
def test_one_unreadable_clause_costs_only_its_own_option(prompt: str, options: list[MenuOption]) -> None:
    assert parse_menu(prompt) == options


@pytest.mark.parametrize(("earlier", "later", "merged"), [
    # the first hearing lost a label, the second has it
    ([MenuOption("sales", "1"), MenuOption("", "2"), MenuOption("support", "3")],
     [MenuOption("sales", "1"), MenuOption("billing", "2")],
     [MenuOption("sales", "1"), MenuOption("billing", "2"), MenuOption("support", "3")]),
    # a key lost in one hearing comes from the other, in its place
    ([MenuOption("sales", "1"), MenuOption("support", "3")],
     [MenuOption("sales", "1"), MenuOption("billing", "2"), MenuOption("support", "3")],
     [MenuOption("sales", "1"), MenuOption("billing", "2"), MenuOption("support", "3")]),
    # a label cut short in one hearing: the longer reading
    ([MenuOption("change your order", "2")], [MenuOption("change your order or a return", "2")],
     [MenuOption("change your order or a return", "2")]),
    # two readings of one label: both kept for the chooser
    ([MenuOption("feeling", "2")], [MenuOption("billing", "2")], [MenuOption("feeling / billing", "2")]),
    # the spoken word of an option heard once
    ([MenuOption("billing", "1")], [MenuOption("billing", "1", "billing")], [MenuOption("billing", "1", "billing")]),
])
def test_two_hearings_of_a_menu_merge(earlier: list[MenuOption], later: list[MenuOption],
                                      merged: list[MenuOption]) -> None:
    assert merge_hearings(earlier, later) == merged


SPANISH = ("Gracias por llamar a Acme. Para ventas, oprima uno. Para facturación, press 2. "
           "Para soporte técnico, oprima tres.")
FRENCH = ("Merci d'avoir appelé Acme. Pour la facturation, appuyez sur le 2. "
          "Pour parler à un conseiller, restez en ligne.")


@pytest.mark.parametrize(("prompt", "language"), [
    (SPANISH, "spanish"), (FRENCH, "french"), (MAIN, ""),
    ("For sales, press 1. For billing, press 2. Para español, oprima nueve.", ""),  # one line for Spanish speakers
    ("Para español, oprima dos.", ""),  # too little to tell: at most an option
])
def test_a_prompt_in_another_language_is_told(prompt: str, language: str) -> None:
    assert other_language(prompt) == language


@pytest.mark.parametrize("prompt", [SPANISH, FRENCH])
def test_a_prompt_in_another_language_has_no_options(prompt: str) -> None:
    assert parse_menu(prompt) == []
    assert classify_prompt(prompt) == "foreign"


def navigator(goal: str) -> MenuNavigator:
    return MenuNavigator(GoalMatcher(goal, similarity()))


def test_a_prompt_in_another_language_is_waited_through_with_why() -> None:
    nav = navigator("refill a prescription")
    assert nav.heard(MAIN) == Wait("no option toward the goal yet")
    step = nav.heard(SPANISH)  # not a garbled hearing of the menu before: no second hearing, no fallback yet
    assert isinstance(step, Wait) and "another language (spanish)" in step.reason
    assert nav.heard(MAIN) == Press("0", "operator")


def test_a_repeated_menu_is_chosen_in_with_what_both_hearings_heard() -> None:
    nav = navigator("refill a prescription")
    first = "For sales, press 1. For billing, press 2. For all other questions, press 9."
    assert nav.heard(first) == Wait("no option toward the goal yet")
    # the second hearing lost "press 9": the menu's own way to a person is still known from the first
    _, options = nav.options_for("For sales, press 1. For billing, press 2. For all other questions, presto.")
    assert options[-1] == MenuOption("all other questions", "9")
    assert nav.heard("For sales, press 1. For billing, press 2. For all other questions, presto.") == \
        Press("9", "all other questions")


def test_a_dead_end_names_the_options_of_both_hearings() -> None:
    nav = navigator("refill a prescription")
    nav.heard("For sales, press 1. For billing, press 2. For an operator, press 0.")
    assert nav.heard("For sales, press 1. For billing, press 2. For technical support, press 3.") == \
        Press("0", "an operator")
    step = nav.heard("For sales, press 1. For billing, press 2. For technical support, press 3.")
    assert isinstance(step, Stop) and "technical support" in step.reason
