"""Outbound calls through phone menus, end to end: voicegate dials a menu server (ivr_server.py) over SIP
on loopback, hears its Piper and espeak-ng prompts with Whisper, presses keys (RFC 4733, or SIP INFO when
the menu's SDP took no telephone-event), waits through hold music, and greets the person who answers; a
menu with no way to the goal is a dead end with its reason."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO
from tests.sip_calls.conftest import outbound_cli_config, sip_calls_config
from tests.sip_calls.ivr_server import IvrServer, KeyMethod, MenuNode, MenuTree
from tests.sip_calls.test_outbound import API_KEY, AUTH
from tests.speech import neural, speak
from voicegate.internal.config import Config
from voicegate.internal.config.providers import WhisperConfig
from voicegate.internal.config.sections import PipelineConfig
from voicegate.internal.stt.whisper import WhisperSpeechToText
from voicegate.internal.telephony.menu import parse_menu
from voicegate.server.app import create_gateway_application

pytestmark = pytest.mark.slow

GREETING = "Hello, I am calling about my bill."
PERSON = "Billing, this is Dana speaking. How can I help you?"
MAIN = ("Thank you for calling Northwind Energy. For sales, press 1. For billing, press 2. "
        "For technical support, press 3.")
BILLING = "Billing department. To hear your balance, press 1. To speak with a billing representative, press 2."
HOLD = "Please hold while we connect you to the next available representative."
# The queue speaks in espeak-ng's voice, the menus and the person in Piper's (Whisper tiny.en hears
# espeak-ng's "billing" as "feeling" through 8 kHz: docs/sip.md, "Phone menus").
ESPEAK_SAYS = {HOLD}


def northwind(*, person: str = PERSON) -> MenuTree:
    return MenuTree({
        "main": MenuNode(MAIN, keys={"1": "sales", "2": "billing", "3": "support"}),
        "billing": MenuNode(BILLING, keys={"1": "balance", "2": "queue"}),
        "queue": MenuNode(HOLD, kind="hold",
                          hold_s=4.0, then="person"),
        "person": MenuNode(person, kind="person"),
        "sales": MenuNode("Our sales office is now closed. Goodbye.", kind="closed"),
        "support": MenuNode("Our support office is now closed. Goodbye.", kind="closed"),
        "balance": MenuNode("Your balance is zero dollars. Goodbye.", kind="closed"),
    }, wait_s=20.0)  # patient: on a loaded machine Whisper may take seconds over a long prompt


def render(text: str) -> bytes:
    return speak(text, 8000) if text in ESPEAK_SAYS else neural([text], 8000)[0]


async def started(tree: MenuTree, keys: KeyMethod) -> IvrServer:
    ivr = IvrServer(tree, render, keys=keys)
    await ivr.start()
    return ivr


async def walk_menu(client: Any, target: str, goal: str) -> dict[str, Any]:
    """POST /calls with `goal`, waiting for the menu walk: the call's `menu` report."""
    response = await client.post("/calls", json={"to": target, "goal": goal, "wait_for_menu": True}, headers=AUTH)
    assert response.status_code == 201, response.text
    menu: dict[str, Any] = response.json()["menu"]
    return menu


def menu_config(tmp_path: Path) -> Config:
    config = sip_calls_config(tmp_path, symmetric_rtp=False)
    config.pipeline.vad = "silero"  # the product's defaults: hold music is no voice to Silero
    config.pipeline.end_of_turn = "smart_turn"
    config.pipeline.vad_offset_ms = PipelineConfig().vad_offset_ms
    config.pipeline.greeting_outgoing = GREETING
    config.server.api_key = API_KEY
    return config


@pytest.fixture
async def whisper_server(tmp_path: Path) -> AsyncIterator[Callable[[Config], Any]]:
    """The whole app with Whisper (never shedding an utterance: the machine may be loaded) and a client."""
    opened: list[tuple[Any, httpx.AsyncClient, WhisperSpeechToText]] = []

    async def factory(config: Config) -> tuple[Any, httpx.AsyncClient]:
        stt = WhisperSpeechToText(WhisperConfig(workers=1, shed_after_ms=0), tmp_path / "models")
        app = create_gateway_application(config, stt=stt)
        gateway = app.state.gateway
        await gateway.start()
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://voicegate", timeout=300)
        opened.append((gateway, client, stt))
        return gateway, client

    yield factory
    for gateway, client, stt in opened:
        await client.aclose()
        await gateway.stop()
        await stt.aclose()


async def test_post_calls_with_a_goal_reaches_billing_pressing_keys_as_sip_info(
        whisper_server: Callable[[Config], Any], tmp_path: Path) -> None:
    ivr = await started(northwind(), "info")
    try:
        _, client = await whisper_server(menu_config(tmp_path))
        menu = await walk_menu(client, ivr.target, "reach billing")
        assert menu["result"] == "reached", (menu["heard"], menu, ivr.log)
        # the keys; the labels are as Whisper heard them
        assert [step.split(" ", 1)[0] for step in menu["path"]] == ["2", "2"], menu
        assert all("billing" in step for step in menu["path"]), menu
        assert "dana" in menu["reason"].lower()
        assert [line for line in ivr.log if line.startswith("key")] == ["key 2 info", "key 2 info"]
        assert "node person" in ivr.log
        await asyncio.wait_for(ivr.ended.wait(), 120)  # the person listened to the agent, then hung up
        assert len(ivr.heard) > 0
    finally:
        await ivr.stop()


async def test_a_menu_with_no_way_to_the_goal_is_a_dead_end_with_its_reason(
        whisper_server: Callable[[Config], Any], tmp_path: Path) -> None:
    ivr = await started(northwind(), "rfc4733")
    try:
        _, client = await whisper_server(menu_config(tmp_path))
        menu = await walk_menu(client, ivr.target, "refill a prescription at the pharmacy")
        assert menu["result"] == "dead_end", (menu["heard"], menu, ivr.log)
        assert "no option toward" in menu["reason"] and "billing" in menu["reason"], menu
        assert menu["path"] == ["0 operator"]  # the way to a person, tried once
        assert "key 0 rfc4733" in ivr.log and "invalid 0" in ivr.log
        await asyncio.wait_for(ivr.ended.wait(), 60)  # we hung up
    finally:
        await ivr.stop()


def cli_config(tmp_path: Path) -> Path:
    return outbound_cli_config(tmp_path, GREETING, """[stt]
provider = "whisper"
[whisper]
workers = 1
shed_after_ms = 0
[tts]
provider = "espeak"
[llm]
provider = "local"
""")


async def test_voicegate_call_with_a_goal_reaches_billing_through_two_menus_with_rfc4733_keys(
        tmp_path: Path) -> None:
    ivr = await started(northwind(), "rfc4733")
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VOICEGATE_")}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "voicegate", "--config", str(cli_config(tmp_path)), "call", ivr.target,
            "--goal", "reach billing", cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        try:
            raw, _ = await asyncio.wait_for(process.communicate(), 300)
        except TimeoutError:
            process.kill()
            raw, _ = await process.communicate()
        output = raw.decode(errors="replace")
        assert process.returncode == 0, (output, ivr.log)
        lines = output.splitlines()
        steps = [line for line in lines if line.startswith("menu: 2 ")]
        assert len(steps) == 2 and all("billing" in step for step in steps), output
        reached = [line for line in lines if line.startswith("menu: reached")]
        assert len(reached) == 1 and "dana" in reached[0].lower(), output  # what the person said
        assert f"  agent: {GREETING}" in lines, output
        assert [line for line in ivr.log if line.startswith("key")] == ["key 2 rfc4733", "key 2 rfc4733"]
        assert ivr.log.index("node queue") < ivr.log.index("node person")
        assert len(ivr.heard) > 0  # the person heard the agent
    finally:
        await ivr.stop()


# The last option's key in another language, which Whisper writes as no key. Read as one menu
# ("labels after the keys", from the "For technical support ..." after the last key) every label moved onto
# the key before it, and "billing" was pressed as 1.
SLIPPED_MAIN = ("Thank you for calling Northwind Energy. For sales, press 1. For billing, press 2. "
                "For technical support, oprima tres.")


async def test_a_menu_with_one_unreadable_clause_still_reaches_billing(
        whisper_server: Callable[[Config], Any], tmp_path: Path) -> None:
    tree = northwind()
    tree.nodes["main"] = MenuNode(SLIPPED_MAIN, keys={"1": "sales", "2": "billing", "3": "support"})
    ivr = await started(tree, "rfc4733")
    try:
        _, client = await whisper_server(menu_config(tmp_path))
        menu = await walk_menu(client, ivr.target, "reach billing")
        # the clause was heard as no key (else this call tests nothing)
        assert "3" not in {option.key for option in parse_menu(menu["heard"][0])}, menu["heard"]
        assert menu["result"] == "reached", (menu["heard"], menu, ivr.log)
        assert [step.split(" ", 1)[0] for step in menu["path"]] == ["2", "2"], menu
        assert [line for line in ivr.log if line.startswith("key")] == ["key 2 rfc4733", "key 2 rfc4733"]
        assert "node person" in ivr.log
    finally:
        await ivr.stop()
