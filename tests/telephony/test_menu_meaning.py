"""Choosing a menu's option by meaning, as tables: who counts as a person, the shipped paraphrases and the
deployer's synonyms, the model's answer read (an option the menu did not offer refused), and the model's
timeout or bad answer falling back to the offline matcher."""

from __future__ import annotations

import asyncio
import functools

import pytest

from voicegate.internal.config.providers import OllamaConfig, OpenAIConfig
from voicegate.internal.config.telephony import MenusConfig
from voicegate.internal.telephony.menu import MenuOption
from voicegate.internal.telephony.menu_choice import GoalMatcher, WordLlamaSimilarity, operator_option
from voicegate.internal.telephony.menu_model import (
    ModelGoalMatcher,
    menu_question,
    model_completion,
    read_answer,
)

BAGS = "Bluebird Air. For new reservations, press 1. For flight status, press 2. For delayed or missing bags, press 3."
SUITCASE = "my suitcase never showed up"
BAG_OPTIONS = [MenuOption("new reservations", "1"), MenuOption("flight status", "2"),
               MenuOption("delayed or missing bags", "3")]


@functools.cache
def similarity() -> WordLlamaSimilarity:
    return WordLlamaSimilarity()


@pytest.mark.parametrize(("label", "person"), [
    ("speak to an agent", True),
    ("agent", True),  # a spoken menu's word
    ("speak with a live agent", True),
    ("a customer service agent", True),
    ("customer service", True),
    ("a representative", True),
    ("the operator", True),
    ("speak to someone", True),
    ("talk to a real person", True),
    ("person", True),
    # a trade's agent is a department, not the way to a person
    ("find an insurance agent near you", False),
    ("speak with a travel agent", False),
    ("estate agents", False),
    ("a booking agent", False),
    ("letting agents and landlords", False),
    ("personal training", False),
    ("an in person visit", False),
    ("billing", False),
])
def test_only_words_that_mean_a_human_are_the_way_to_a_person(label: str, person: bool) -> None:
    option = MenuOption(label, "4")
    assert (operator_option([MenuOption("sales", "1"), option]) == option) is person


@pytest.mark.parametrize(("goal", "options", "key"), [
    # the examples: no word shared with the right option
    ("my train was called off", [MenuOption("buy tickets", "1"), MenuOption("changes to an existing booking", "2"),
                                 MenuOption("lost property", "3")], "2"),
    ("the heating stopped working", [MenuOption("pay a bill", "1"), MenuOption("report a fault", "2")], "2"),
    # the development splits' misses (bench/sip/menus.py unseen, final)
    ("my car was in an accident", [MenuOption("a new quote", "1"), MenuOption("make a claim", "2"),
                                   MenuOption("renew", "3")], "2"),
    ("appeal a parking ticket", [MenuOption("pay a penalty charge", "1"),
                                 MenuOption("challenge a penalty charge", "2"), MenuOption("permits", "3")], "2"),
    ("book a room", [MenuOption("reservations", "1"), MenuOption("the restaurant", "2"),
                     MenuOption("events and weddings", "3")], "1"),
])
def test_shipped_paraphrases_meet_the_words_menus_use(goal: str, options: list[MenuOption], key: str) -> None:
    choice = GoalMatcher(goal, similarity()).choose(options)
    assert choice is not None and choice.option.key == key


def test_without_the_paraphrases_those_goals_find_nothing() -> None:
    options = [MenuOption("buy tickets", "1"), MenuOption("changes to an existing booking", "2")]
    assert GoalMatcher("my train was called off", similarity(), paraphrases=False).choose(options) is None


def test_the_deployers_synonyms_are_the_goals_words() -> None:
    goal = "my suitcase never showed up"
    assert GoalMatcher(goal, similarity()).choose(BAG_OPTIONS) is None
    choice = GoalMatcher(goal, similarity(), synonyms={"suitcase": ["bags", "luggage"]}).choose(BAG_OPTIONS)
    assert choice is not None and choice.option.key == "3"


def test_the_model_is_asked_with_the_goal_the_options_and_the_path() -> None:
    question = menu_question("my suitcase never showed up", [*BAG_OPTIONS, MenuOption("an agent", word="agent")],
                             ["2 baggage"])
    assert question.splitlines() == [
        "Goal: my suitcase never showed up", "Pressed so far: 2 baggage", "Options:",
        "- key 1: new reservations", "- key 2: flight status", "- key 3: delayed or missing bags",
        "- say agent: an agent", 'Answer with JSON only, e.g. {"choice": "2"}.']


@pytest.mark.parametrize(("reply", "verdict", "key"), [
    ('{"choice": "3"}', "option", "3"),
    ('{"choice": 3}', "option", "3"),
    ('Sure! {"choice": "key 3"}', "option", "3"),
    ('{"choice": "wait"}', "wait", ""),
    ('{"choice": "operator"}', "operator", ""),
    ('{"choice": "dead_end"}', "dead_end", ""),
    ('{"choice": "9"}', "invalid", ""),  # a key the menu did not offer: never pressed
    ('{"choice": "agent"}', "invalid", ""),  # nor a word it did not offer
    ("3", "invalid", ""),  # not the JSON asked for
    ('{"choice": ', "invalid", ""),  # cut at the token limit
    ("", "invalid", ""),
])
def test_the_models_answer_counts_only_for_what_the_menu_offered(reply: str, verdict: str, key: str) -> None:
    answer = read_answer(reply, BAG_OPTIONS)
    assert answer.verdict == verdict
    assert (answer.option.key if answer.option else "") == key


def answering(reply: str, delay_s: float = 0.0):  # type: ignore[no-untyped-def]
    async def complete(system: str, user: str) -> str:
        await asyncio.sleep(delay_s)
        return reply

    return complete


async def chosen(goal: str, prompt: str, complete, timeout_s: float = 2.0) -> str:  # type: ignore[no-untyped-def]
    from voicegate.internal.telephony.menu import parse_menu

    matcher = ModelGoalMatcher(goal, complete, timeout_s, similarity())
    await matcher.consider(prompt, [])
    choice = matcher.choose(parse_menu(prompt))
    return f"{choice.why} {choice.option.key}" if choice else "none"


@pytest.mark.parametrize(("goal", "reply", "delay_s", "expected"), [
    ("my suitcase never showed up", '{"choice": "3"}', 0.0, "model 3"),
    ("my suitcase never showed up", '{"choice": "dead_end"}', 0.0, "none"),
    ("my suitcase never showed up", '{"choice": "wait"}', 0.0, "none"),
    # the model sees nothing, but an option shares the goal's words: they stand
    ("check my flight status", '{"choice": "dead_end"}', 0.0, "words 2"),
    ("check my flight status", '{"choice": "wait"}', 0.0, "words 2"),
    # refused or late: the offline matcher chooses ("flight status" shares "flight")
    ("check my flight status", '{"choice": "9"}', 0.0, "words 2"),
    ("check my flight status", "I think you should press three", 0.0, "words 2"),
    ("check my flight status", '{"choice": "1"}', 5.0, "words 2"),
])
async def test_the_models_choice_stands_unless_refused_or_late(goal: str, reply: str, delay_s: float,
                                                               expected: str) -> None:
    assert await chosen(goal, BAGS, answering(reply, delay_s), timeout_s=0.3) == expected


async def test_operator_from_the_model_is_only_a_way_out_the_menu_names_as_a_person() -> None:
    trade = "Anchor Insurance. For car insurance, press 1. To find an insurance agent near you, press 4."
    assert await chosen("a tree fell on my house", trade, answering('{"choice": "operator"}')) == "none"
    person = "Anchor Insurance. For car insurance, press 1. To speak to an agent, press 0."
    assert await chosen("a tree fell on my house", person, answering('{"choice": "operator"}')) == "model 0"


async def test_a_prompt_that_is_no_menu_is_not_put_to_the_model() -> None:
    asked: list[str] = []

    async def complete(system: str, user: str) -> str:
        asked.append(user)
        return '{"choice": "wait"}'

    matcher = ModelGoalMatcher("reach billing", complete, 1.0, similarity())
    await matcher.consider("Please hold, your call is important to us.", [])
    await matcher.consider("Billing, this is Dana, how can I help?", [])
    assert asked == []


@pytest.mark.parametrize(("chooser", "provider", "asks"), [
    ("auto", "local", False), ("auto", "openai", True), ("auto", "ollama", True), ("auto", "agent", False),
    ("model", "openai", True), ("model", "local", False),  # nothing to ask: offline, with a warning
    ("offline", "openai", False),
])
def test_who_chooses(chooser: str, provider: str, asks: bool) -> None:
    config = MenusConfig(chooser=chooser)  # type: ignore[arg-type]
    completion = model_completion(config, provider, OpenAIConfig(base_url="http://127.0.0.1:9/v1"),
                                  OllamaConfig(base_url="http://127.0.0.1:9"))
    assert (completion is not None) is asks


async def test_the_answer_stands_for_the_menus_two_hearings_merged_but_only_for_a_key_they_offer() -> None:
    from voicegate.internal.telephony.menu import parse_menu

    matcher = ModelGoalMatcher(SUITCASE, answering('{"choice": "3"}'), 1.0, similarity())
    await matcher.consider(BAGS, [])
    merged = [*parse_menu(BAGS)[:2], MenuOption("delayed or missing bags and claims", "3")]
    choice = matcher.choose(merged)
    assert choice is not None and choice.option is merged[2] and choice.why == "model"
    assert matcher.choose(merged[:2]) is None  # key 3 not among them: the offline matcher finds nothing


async def test_the_configured_providers_are_asked_with_bounded_answers() -> None:
    from tests.fakes.ollama_fake import FakeOllama
    from tests.fakes.openai_fake import FakeOpenAI

    config = MenusConfig(model_max_tokens=32)
    async with FakeOpenAI() as openai_fake, FakeOllama() as ollama_fake:
        openai_fake.script_reply('{"choice": "3"}')
        ollama_fake.script_reply('{"choice": "3"}')
        for provider in ("openai", "ollama"):
            complete = model_completion(config, provider, OpenAIConfig(base_url=openai_fake.url + "/v1"),
                                        OllamaConfig(base_url=ollama_fake.url))
            assert complete is not None
            assert await chosen(SUITCASE, BAGS, complete) == "model 3"
        asked = openai_fake.requests[0]
        assert asked["max_tokens"] == 32 and asked["temperature"] == 0 and not asked.get("stream")
        assert f"Goal: {SUITCASE}" in asked["messages"][-1]["content"]
        native = ollama_fake.requests[0]
        assert native["options"] == {"temperature": 0, "num_predict": 32} and native["format"] == "json"
        assert native["stream"] is False


async def test_the_model_is_asked_about_the_options_the_navigator_will_choose_among() -> None:
    from voicegate.internal.telephony.navigator import MenuNavigator

    asked: list[str] = []

    async def complete(system: str, user: str) -> str:
        asked.append(user)
        return '{"choice": "wait"}' if len(asked) == 1 else '{"choice": "3"}'

    matcher = ModelGoalMatcher(SUITCASE, complete, 1.0, similarity())
    navigator = MenuNavigator(matcher)
    first = "Bluebird Air. For new reservations, press 1. For flight status, press 2."
    for prompt in (first, BAGS):  # the same menu heard again, longer: one menu, two hearings merged
        await matcher.consider(prompt, navigator.path(), navigator.options_for(prompt)[1])
        step = navigator.heard(prompt)
    assert "- key 3: delayed or missing bags" in asked[-1]
    assert navigator.path() == ["3 delayed or missing bags"], step
