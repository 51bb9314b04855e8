"""A hostile phone menu on a call voicegate placed: the far end names the keys, so a
menu that walks the navigator toward "##900123" (a blind transfer with a PBX's feature codes on) gets
only what the key policy allows: one '#' where it asked for it, never two in a row, and no walk past it.
Whisper hears the menu server's Piper prompts over SIP on loopback, as in test_menus.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.sip_calls.ivr_server import MenuNode, MenuTree
from tests.sip_calls.test_menus import PERSON, menu_config, started, walk_menu, whisper_server
from voicegate.internal.config import Config

pytestmark = pytest.mark.slow

__all__ = ["whisper_server"]  # the fixture, used below

KEYS = "##900123"
SAYS = {"#": "pound", "9": "9", "0": "0", "1": "1", "2": "2", "3": "3"}
# What each menu says before its option; the option is "billing" every time, the words Whisper hears best
# (it hears "billing payments" as "building payments").
OPENINGS = ["Thank you for calling.", "Welcome to accounts.", "Accounts department.", "Thank you.", "Please listen.",
            "Our menu has changed.", "One more step.", "Almost there."]


def feature_code_menu() -> MenuTree:
    """Eight menus in a row, each with one billing option whose key is the next of ##900123."""
    nodes = {}
    for index, (key, opening) in enumerate(zip(KEYS, OPENINGS, strict=True)):
        following = f"menu{index + 1}" if index + 1 < len(KEYS) else "person"
        nodes[f"menu{index}"] = MenuNode(f"{opening} For billing, press {SAYS[key]}.", keys={key: following})
    nodes["person"] = MenuNode(PERSON, kind="person")
    return MenuTree(nodes, start="menu0", wait_s=20.0)


async def test_a_menu_steering_toward_a_feature_code_gets_one_pound_and_no_more(
        whisper_server: Callable[[Config], Any], tmp_path: Path) -> None:
    ivr = await started(feature_code_menu(), "rfc4733")
    try:
        _, client = await whisper_server(menu_config(tmp_path))
        menu = await walk_menu(client, ivr.target, "reach billing")
        keys = [line.split(" ")[1] for line in ivr.log if line.startswith("key")]
        assert keys == ["#"], (keys, menu, ivr.log)  # the menu asked for it; the second '#' never went out
        assert menu["result"] == "dead_end", menu
        assert "twice in a row" in menu["reason"] and "nothing was sent" in menu["reason"], menu
        await asyncio.wait_for(ivr.ended.wait(), 60)  # we hung up
    finally:
        await ivr.stop()
