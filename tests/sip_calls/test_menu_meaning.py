"""Choosing a menu's option by meaning, on real calls: voicegate dials the menu server (ivr_server.py) over
SIP on loopback, hears its Piper prompts with Whisper and chooses with a model (a local OpenAI-compatible
server, tests/fakes/openai_fake.py, answering by a rule stated in each test) or offline; a trade's
"agent" is no way to a person; a key the model names that the menu did not offer is never pressed, and a
model that does not answer in time leaves the choice to the offline matcher."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_fake import FakeOpenAI
from tests.sip_calls import test_menus
from tests.sip_calls.ivr_server import MenuNode, MenuTree
from tests.sip_calls.test_menus import HOLD, PERSON, menu_config, northwind, started, walk_menu
from voicegate.internal.config import Config

pytestmark = pytest.mark.slow
whisper_server = test_menus.whisper_server  # the fixture: the whole app with Whisper, and a client

# No word of the goal is in the right option's label ("suitcase" / "bags").
AIRLINE = ("Thank you for calling Bluebird Air. Press 1 for new reservations. Press 2 for flight status. "
           "Press 3 for delayed or missing bags.")
SUITCASE = "my suitcase never showed up"
TRAVEL = "Sunway Travel. For holiday packages, press 1. To speak with a travel agent, press 2."


def airline() -> MenuTree:
    return MenuTree({
        "main": MenuNode(AIRLINE, keys={"1": "closed", "2": "closed", "3": "queue"}),
        "queue": MenuNode(HOLD, kind="hold", hold_s=3.0, then="person"),
        "person": MenuNode(PERSON.replace("Billing", "Baggage"), kind="person"),
        "closed": MenuNode("That department is now closed. Goodbye.", kind="closed"),
    }, wait_s=20.0)


def options_in(body: dict[str, Any]) -> list[tuple[str, str]]:
    """The options voicegate put to the model: ("3", "delayed or missing bags"), as Whisper heard them."""
    user = body["messages"][-1]["content"]
    return re.findall(r"^- (?:key|say) (\S+): (.*)$", user, re.M)


def bags_rule(body: dict[str, Any]) -> str:
    """The stand-in model's rule: the option whose label speaks of bags or luggage, else wait. It reads the
    options from the prompt (it is told no key), so what the call proves is the way there and back."""
    for key, label in options_in(body):
        if re.search(r"\bbag|\bluggage", label):
            return json.dumps({"choice": key})
    return '{"choice": "wait"}'


def with_model(config: Config, fake: FakeOpenAI) -> Config:
    config.llm.provider = "openai"
    config.openai.base_url, config.openai.api_key = fake.url + "/v1", "test"
    config.menus.chooser = "model"
    return config


def keys_sent(log: list[str]) -> list[str]:
    return [line.split()[1] for line in log if line.startswith("key")]


async def test_a_goal_sharing_no_word_with_its_option_is_reached_with_the_model(
        whisper_server: Callable[[Config], Any], tmp_path: Path) -> None:
    ivr = await started(airline(), "rfc4733")
    try:
        async with FakeOpenAI() as fake:
            fake.default_reply = bags_rule
            _, client = await whisper_server(with_model(menu_config(tmp_path), fake))
            menu = await walk_menu(client, ivr.target, SUITCASE)
        assert menu["result"] == "reached", (menu, ivr.log)
        assert keys_sent(ivr.log) == ["3"] and "node person" in ivr.log
        asked = fake.requests[0]
        assert f"Goal: {SUITCASE}" in asked["messages"][-1]["content"]
        assert ("3", "delayed or missing bags") in [(k, label.rstrip(".")) for k, label in options_in(asked)]
        assert asked["max_tokens"] == 40 and asked["temperature"] == 0
    finally:
        await ivr.stop()


async def test_the_same_goal_is_reached_offline_through_the_deployers_synonyms(
        whisper_server: Callable[[Config], Any], tmp_path: Path) -> None:
    ivr = await started(airline(), "info")
    try:
        config = menu_config(tmp_path)
        config.menus.synonyms = {"suitcase": ["bags", "luggage"]}
        _, client = await whisper_server(config)
        menu = await walk_menu(client, ivr.target, SUITCASE)
        assert menu["result"] == "reached", (menu, ivr.log)
        assert keys_sent(ivr.log) == ["3"]
    finally:
        await ivr.stop()


async def test_a_travel_agent_is_not_taken_for_a_person(
        whisper_server: Callable[[Config], Any], tmp_path: Path) -> None:
    tree = MenuTree({
        "main": MenuNode(TRAVEL, keys={"1": "closed", "2": "closed"}),
        "closed": MenuNode("That department is now closed. Goodbye.", kind="closed"),
    }, wait_s=20.0)
    ivr = await started(tree, "rfc4733")
    try:
        _, client = await whisper_server(menu_config(tmp_path))
        menu = await walk_menu(client, ivr.target, "order a pizza")
        assert menu["result"] == "dead_end", (menu, ivr.log)
        # nothing fits: the way to a person tried is key 0, never the travel agents' line
        assert keys_sent(ivr.log) == ["0"], (menu, ivr.log)
        assert "node closed" not in ivr.log
    finally:
        await ivr.stop()


async def test_a_key_the_menu_did_not_offer_is_refused_and_a_late_model_leaves_the_choice_offline(
        whisper_server: Callable[[Config], Any], tmp_path: Path) -> None:
    ivr = await started(northwind(), "rfc4733")

    def late(body: dict[str, Any]) -> str:
        time.sleep(3.0)  # past model_timeout_ms; and a wrong answer if it were waited for
        return '{"choice": "1"}'

    try:
        async with FakeOpenAI() as fake:
            fake.script_reply('{"choice": "9"}')  # the first menu: a key it did not offer
            fake.default_reply = late
            config = with_model(menu_config(tmp_path), fake)
            config.menus.model_timeout_ms = 1000
            _, client = await whisper_server(config)
            menu = await walk_menu(client, ivr.target, "reach billing")
        assert menu["result"] == "reached", (menu, ivr.log)
        assert keys_sent(ivr.log) == ["2", "2"], ivr.log  # the offline matcher's billing, twice
        assert len(fake.requests) >= 2  # both menus were put to the model
    finally:
        await ivr.stop()
