"""The phone-menu navigator's rules, as tables: reading a prompt's options, telling a menu from a person,
a queue, a voicemail greeting or a dead end, choosing toward the goal, and when to stop."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from voicegate.internal.stt.base import Transcript
from voicegate.internal.telephony.menu import MenuOption, classify_prompt, parse_menu
from voicegate.internal.telephony.menu_choice import (
    GoalMatcher,
    WordLlamaSimilarity,
    acronyms,
    goal_focus,
    spells_out,
)
from voicegate.internal.telephony.navigation import PROMPT_MAX_S, MenuListener, heard_whole
from voicegate.internal.telephony.navigator import (
    HandOver,
    MenuNavigator,
    NavigationSettings,
    Press,
    Say,
    Stop,
    Wait,
)

MAIN = "Thank you for calling Acme. For sales, press 1. For billing, press 2. For technical support, press 3."
OPTIONS = [MenuOption("sales", "1"), MenuOption("billing", "2"), MenuOption("technical support", "3")]


@functools.cache
def similarity() -> WordLlamaSimilarity:
    return WordLlamaSimilarity()


@pytest.mark.parametrize(("prompt", "options"), [
    (MAIN, OPTIONS),
    ("Press 1 for sales. Press 2 for billing. Press 3 for technical support.", OPTIONS),
    ("for sales press one for billing press two for technical support press three", OPTIONS),
    ("Thank you for calling Acme. For sales. Press 1. for billing Press 2. for technical support. Press 3.", OPTIONS),
    ("If you are calling about an existing order, press 4. If you would like to check your balance, press the "
     "pound key.", [MenuOption("an existing order", "4"), MenuOption("check your balance", "#")]),
    ("For billing, press 1 or say billing. To speak to an agent, say 'agent'.",
     [MenuOption("billing", "1", "billing"), MenuOption("speak to an agent", word="agent")]),
    ("Press star to repeat these options.", [MenuOption("repeat these options", "*")]),
    ("Press 1 for sales. Press 1 for sales.", [MenuOption("sales", "1")]),  # heard twice in one prompt
    ("Billing, this is Dana, how can I help?", []),
    ("Please hold, your call is important to us.", []),
    # As Whisper writes menus: a welcome's "to" is no label-first sign; sentence ends anywhere; a key
    # run into the verb, or heard as a word
    ("Welcome to Acme Gas. Press 1 to report a leak. Press 2 for billing.",
     [MenuOption("report a leak", "1"), MenuOption("billing", "2")]),
    ("Acme Gas, report a leak. Press 1. for billing. Press 2.",
     [MenuOption("acme gas report a leak", "1"), MenuOption("billing", "2")]),
    ("Acme. if you are a new customer. Press 1. if you have an account. Press 2.",
     [MenuOption("new customer", "1"), MenuOption("account", "2")]),
    ("Press to for billing. Dial3 for sales.", [MenuOption("billing", "2"), MenuOption("sales", "3")]),
    ("Acme. To pay a bill. Press 1. to order. Press. 2.", [MenuOption("pay a bill", "1"), MenuOption("order", "2")]),
    # "press three" heard as "pressed three": still a key, so the menu still reads label first
    ("Acme Water. if you see a flood. Press 1 now. to pay. Press 2. for anything else. pressed. 3.",
     [MenuOption("see a flood", "1"), MenuOption("pay", "2"), MenuOption("anything else", "3")]),
    # a sentence end inside a label ("... your order. or a return. Press 2."), and "if you're"
    ("Acme. to pay. Press 1. to change your order. or a return. Press 2. if you're a new customer. Press 3.",
     [MenuOption("pay", "1"), MenuOption("change your order or a return", "2"), MenuOption("new customer", "3")]),
])
def test_a_prompt_reads_as_its_options(prompt: str, options: list[MenuOption]) -> None:
    assert parse_menu(prompt) == options


@pytest.mark.parametrize(("prompt", "kind"), [
    (MAIN, "menu"),
    ("That is not a valid option. " + MAIN, "menu"),  # the complaint comes with the menu again
    ("I'm sorry, that is not a valid option.", "invalid"),
    ("Our office is now closed. Please call back during business hours. Goodbye.", "closed"),
    ("Hi, you've reached Sam. Please leave a message after the tone.", "voicemail"),
    ("You have reached Acme.", "unclear"),  # menus say it too: not a voicemail greeting by itself
    ("Please hold while we transfer your call to the next available representative.", "hold"),
    ("All of our agents are currently assisting other customers.", "hold"),
    ("Billing, this is Dana, how can I help?", "person"),
    ("Hello, Sam speaking.", "person"),
    ("Billing department.", "unclear"),
    ("Feeling the apartment. Please listen carefully as our options have changed.", "garbled_menu"),  # misheard
    ("[Music]", "silence"),
    ("", "silence"),
])
def test_a_prompt_is_classified(prompt: str, kind: str) -> None:
    assert classify_prompt(prompt) == kind


@pytest.mark.parametrize(("goal", "focus"), [
    ("reach billing", "billing"),
    ("get to the billing department", "billing"),
    ("talk to someone about my internet outage", "internet outage"),
])
def test_the_goal_loses_its_verbs_of_travel(goal: str, focus: str) -> None:
    assert goal_focus(goal) == focus


@pytest.mark.parametrize(("goal", "options", "chosen"), [
    ("reach billing", OPTIONS, "2"),
    ("pay my bill", [MenuOption("sales", "1"), MenuOption("billing and payments", "2")], "2"),  # a stem in common
    ("track my order", [MenuOption("pharmacy", "1"), MenuOption("order status", "2"), MenuOption("store hours", "3")],
     "2"),
    ("cancel my subscription", [MenuOption("new accounts", "1"), MenuOption("cancel service", "2")], "2"),
    ("technical support", OPTIONS, "3"),
    ("refill a prescription", OPTIONS, None),  # nothing near: no guess
    ("reach billing", [MenuOption("hear your balance", "1"), MenuOption("speak with a billing representative", "2")],
     "2"),
    # One word in common with two options: what the goal asks to do decides.
    ("change my booking", [MenuOption("new bookings", "1"), MenuOption("change or cancel a trip", "2")], "2"),
    ("renew my subscription", [MenuOption("subscription prices", "1"), MenuOption("renew or upgrade", "2")], "2"),
    # An abbreviation in the goal meets the word it stands for.
    ("fix my PC", [MenuOption("printers", "1"), MenuOption("personal computers", "2")], "2"),
    ("question about my TV", [MenuOption("broadband", "1"), MenuOption("television", "2")], "2"),
    ("dmv appointment", [MenuOption("billing", "1"), MenuOption("department of motor vehicles", "2")], "2"),
    # Something wrong meets the line for faults, in other words on each side.
    ("my phone line keeps cutting out", [MenuOption("new orders", "1"), MenuOption("report a problem", "2")], "2"),
    ("the heating is broken", [MenuOption("repairs", "1"), MenuOption("rent payments", "2")], "1"),
    ("my router isn't working", [MenuOption("sales", "1"), MenuOption("technical help", "2")], "2"),
    ("upgrade my plan", [MenuOption("sales", "1"), MenuOption("report a problem", "2")], None),  # no fault: no
])
def test_the_option_toward_the_goal_is_chosen(goal: str, options: list[MenuOption], chosen: str | None) -> None:
    choice = GoalMatcher(goal, similarity()).choose(options)
    assert (choice.option.key if choice else None) == chosen


@pytest.mark.parametrize(("goal", "found"), [
    ("upgrade my TV package", {"tv"}), ("fix my pc", {"pc"}), ("the DMV", {"dmv"}), ("reach billing", set()),
    ("my ID card", {"id"}), ("an id", {"id"}), ("an ox", set()),  # lower case with a vowel: a word, unless known
])
def test_abbreviations_in_a_goal(goal: str, found: set[str]) -> None:
    assert acronyms(goal) == found


@pytest.mark.parametrize(("acronym", "label", "spelt"), [
    ("tv", "television and streaming", True), ("pc", "pharmacy", False), ("pc", "personal computers", True),
    ("dmv", "the department of motor vehicles", True), ("dmv", "motor vehicle registration", True),
    ("tv", "travel", False), ("id", "new identification cards", True),
])
def test_an_abbreviation_is_spelt_out_by_its_expansion_or_initials(acronym: str, label: str, spelt: bool) -> None:
    assert spells_out(acronym, label) is spelt


def navigator(goal: str = "reach billing", **settings: int) -> MenuNavigator:
    return MenuNavigator(GoalMatcher(goal, similarity()), NavigationSettings(**settings))


def test_two_levels_and_a_queue_lead_to_a_person() -> None:
    nav = navigator()
    assert nav.heard(MAIN) == Press("2", "billing")
    assert nav.heard("Billing. To hear your balance, press 1. For a billing representative, press 2.") == \
        Press("2", "a billing representative")
    assert nav.heard("Please hold while we connect you.") == Wait("on hold")
    assert nav.quiet(8000) is None  # hold music: no silence to speak of... and this is not a person
    step = nav.heard("Billing, this is Dana, how can I help you?")
    assert isinstance(step, HandOver) and "Dana" in step.heard
    assert nav.path() == ["2 billing", "2 a billing representative"]


def test_a_menu_that_asks_to_say_the_option_gets_the_word() -> None:
    assert navigator("speak to an agent").heard("To speak to an agent, say agent. For sales, say sales.") == \
        Say("agent", "speak to an agent")


def test_a_menu_without_the_goal_gets_the_operator_once_then_is_a_dead_end() -> None:
    nav = navigator("refill a prescription")
    assert nav.heard(MAIN) == Wait("no option toward the goal yet")
    assert nav.heard(MAIN) == Press("0", "operator")  # repeated, still nothing: the way to a person
    step = nav.heard("That is not a valid option. " + MAIN)
    assert isinstance(step, Stop) and step.result == "dead_end" and "no option toward" in step.reason
    assert "technical support" in step.reason


def test_the_operator_option_of_a_menu_is_preferred_to_key_zero() -> None:
    nav = navigator("refill a prescription")
    prompt = "For sales press 1. For billing press 2. For all other questions, press 9."
    nav.heard(prompt)
    assert nav.heard(prompt) == Press("9", "all other questions")


def test_a_menu_misheard_a_little_is_still_the_same_menu() -> None:
    nav = navigator("refill a prescription")
    nav.heard(MAIN)
    assert nav.heard("For sales press 1. For billing press 2.") == Press("0", "operator")  # "press 3" lost


def test_a_menu_misheard_entirely_is_taken_for_the_last_one() -> None:
    nav = navigator("refill a prescription")
    nav.heard(MAIN)
    assert nav.heard("Feeling the apartment. Please listen carefully, our options have changed.") == \
        Press("0", "operator")


def test_the_same_menu_after_our_choice_is_chosen_in_again_then_stopped() -> None:
    nav = navigator()
    assert nav.heard(MAIN) == Press("2", "billing")
    assert nav.heard(MAIN) == Press("2", "billing")  # the key may not have been heard
    step = nav.heard(MAIN)
    assert isinstance(step, Stop) and "came back" in step.reason


@pytest.mark.parametrize(("prompts", "result", "reason"), [
    (["That is not a valid option.", "Invalid entry. Please try again."], "dead_end", "refused our choice 2 times"),
    (["Our offices are now closed. Goodbye."], "dead_end", "the menu ended"),
    (["Hi, this is Sam. I can't take your call, please leave a message after the beep."], "voicemail", "machine"),
])
def test_dead_ends_stop_with_their_reason(prompts: list[str], result: str, reason: str) -> None:
    nav = navigator()
    steps = [nav.heard(prompt) for prompt in prompts]
    assert all(isinstance(step, Wait) for step in steps[:-1])
    assert isinstance(steps[-1], Stop) and steps[-1].result == result and reason in steps[-1].reason


def test_someone_who_speaks_and_waits_is_a_person() -> None:
    nav = navigator(person_wait_ms=2500)
    assert nav.heard("Billing department.") == Wait("not a menu: waiting to see whether someone waits for us")
    assert nav.quiet(1000) is None
    assert nav.quiet(2600) == HandOver("someone spoke and waited for an answer", "Billing department.")


def test_whoever_speaks_right_after_the_hold_is_the_person_even_garbled() -> None:
    nav = navigator(person_wait_ms=2500)
    assert nav.heard(MAIN) == Press("2", "billing")
    assert nav.heard("Please stay on the line. Your call will be answered by the next available agent.") == \
        Wait("on hold")
    assert nav.heard("Concerned within, within past, how can I tell?") == \
        HandOver("someone spoke after the hold", "Concerned within, within past, how can I tell?")


def test_without_a_hold_before_it_a_garbled_speaker_is_waited_for() -> None:
    nav = navigator(person_wait_ms=2500)
    assert nav.heard("Concerned within, within past, how can I tell?") == \
        Wait("not a menu: waiting to see whether someone waits for us")


def test_a_dead_line_is_a_dead_end() -> None:
    step = navigator(dead_air_ms=20000).quiet(20000)
    assert isinstance(step, Stop) and step.result == "dead_end" and "nothing on the line" in step.reason


def test_a_menu_tree_deeper_than_max_steps_is_a_loop() -> None:
    nav = navigator(max_steps=2, max_choices_per_menu=5)
    nav.heard(MAIN)
    nav.heard("For billing questions press 4. For sales press 5.")
    step = nav.heard("For billing disputes press 6. For sales press 7.")
    assert isinstance(step, Stop) and "after 2 choices" in step.reason


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_listener_gathers_utterances_into_one_prompt_up_to_a_pause() -> None:
    clock = Clock()
    listener = MenuListener(NavigationSettings(prompt_end_ms=1500), clock)
    for text in ("For sales, press 1.", "For billing, press 2."):
        listener.speech_started(0)
        clock.now += 2.0
        listener.speech_ended(True)
        clock.now += 0.5  # the next option follows within the pause
        assert listener.prompt_ended() is None
        listener.transcript(Transcript(text, final=True))
    assert listener.prompt_ended() is None
    clock.now += 1.0
    assert listener.prompt_ended() == "For sales, press 1. For billing, press 2."
    listener.speech_started(0)
    clock.now += 1.0
    listener.speech_ended(True)
    clock.now += 3.0
    assert listener.prompt_ended() is None  # its words are still on their way
    listener.transcript(Transcript("Please hold.", final=True))
    assert listener.prompt_ended() == "Please hold."


def test_what_the_menu_said_before_our_key_is_not_the_next_prompt() -> None:
    clock = Clock()
    listener = MenuListener(NavigationSettings(), clock)
    listener.speech_started(0)
    listener.stepped()  # we pressed while the menu was still talking
    listener.speech_ended(True)
    listener.transcript(Transcript("For technical support, press 3.", final=True))
    clock.now += 5.0
    assert listener.prompt_ended() is None and listener.words == []


def frame(value: int) -> bytes:
    """20 ms at 8 kHz, every sample `value` (so the test can tell frames apart)."""
    return np.full(160, value, dtype=np.int16).tobytes()


def test_the_listener_keeps_each_prompts_audio_from_just_before_its_first_voice() -> None:
    clock = Clock()
    listener = MenuListener(NavigationSettings(prompt_end_ms=1500), clock, sample_rate=8000)
    for _ in range(50):  # a second of line noise before the menu speaks: only 300 ms of it is kept
        listener.audio(frame(1), False)
    listener.speech_started(0)
    for _ in range(100):
        listener.audio(frame(2), True)
    listener.speech_ended(True)
    for _ in range(10):
        listener.audio(frame(3), False)
    listener.transcript(Transcript("For billing, press 2.", final=True))
    clock.now += 2.0
    assert listener.prompt_ended() == "For billing, press 2."
    assert listener.prompt_audio == frame(1) * 15 + frame(2) * 100 + frame(3) * 10
    listener.audio(frame(4), True)  # the next prompt starts afresh
    listener.stepped()  # ... and what came before our key is no part of the prompt after it
    listener.speech_started(0)
    listener.audio(frame(5), True)
    listener.speech_ended(True)
    listener.transcript(Transcript("Please hold.", final=True))
    clock.now += 2.0
    assert listener.prompt_ended() == "Please hold." and listener.prompt_audio == frame(5)


def test_a_prompt_longer_than_whispers_window_keeps_no_audio() -> None:
    clock = Clock()
    listener = MenuListener(NavigationSettings(prompt_end_ms=1500), clock, sample_rate=8000)
    listener.speech_started(0)
    for _ in range(int(PROMPT_MAX_S / 0.02) + 10):
        listener.audio(frame(2), True)
    listener.speech_ended(True)
    listener.transcript(Transcript("A very long prompt.", final=True))
    clock.now += 2.0
    assert listener.prompt_ended() == "A very long prompt." and listener.prompt_audio == b""


class Ears:
    """What the menu's recogniser would make of a whole prompt (the real one: tests/sip_calls/test_menus.py)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.heard: list[tuple[int, int]] = []

    async def warm_up(self) -> None:
        return None

    async def hear(self, pcm: bytes, sample_rate: int) -> str:
        self.heard.append((len(pcm), sample_rate))
        return self.text


@pytest.mark.parametrize(("ears", "audio", "expected"), [
    (Ears("If you have a burst pipe, press 1."), frame(2), "If you have a burst pipe, press 1."),
    (Ears(""), frame(2), "Maddy Walker, press 1."),  # nothing heard whole: the parts stand
    (Ears("If you have a burst pipe, press 1."), b"", "Maddy Walker, press 1."),  # too long for one window
    (None, frame(2), "Maddy Walker, press 1."),  # no recogniser for menus ([menus] whisper_model = "")
])
async def test_a_prompt_is_read_as_heard_whole_when_it_can_be(ears: Ears | None, audio: bytes, expected: str) -> None:
    listener = MenuListener(NavigationSettings(), Clock(), sample_rate=8000)
    listener.prompt_audio = audio
    assert await heard_whole(ears, listener, "Maddy Walker, press 1.") == expected
    if ears is not None and audio:
        assert ears.heard == [(len(audio), 8000)]


def test_the_goal_reaches_the_agents_context_once_set() -> None:
    from voicegate.internal.pipeline.context import CALL_GOAL, ContextLayers, build_system_context, goal_note

    assert goal_note({}) == []
    context = build_system_context(ContextLayers(policy="Be brief.", extra=goal_note({CALL_GOAL: "reach billing"})))
    assert context.startswith("Be brief.") and "## This call's goal" in context and "reach billing" in context
