"""Stated preferences are not lost (seeds 000 and 004): when the call's model does not use the
memory tool, reconciliation may recover a form of address or reply preference the caller explicitly
stated ("call yourself Skiff from now on" included) into the `user` document, with the caller's words as
evidence; never one it inferred, never a request limited to now, never the assistant profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.memory.processes import ScriptedOpenAI
from tests.memory.test_calls import call, memory_config
from tests.pipeline.conftest import ScriptedStt
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.memory.preferences import is_stated_preference, preference_edit
from voicegate.internal.memory.reconcile import valid_edits
from voicegate.internal.memory.tool import MEMORY_TOOL_DESCRIPTION
from voicegate.server.gateway import Gateway

SAM = CallerIdentity("sip", "+15551234567", "trusted peer")
SCRIPT = ("Caller: hi there\nAgent: Hello! How can I help?\n"
          "Caller: Call yourself Skiff from now on, and call me Sam.\n"
          "Agent: Just this once keep it short? Sure.\n"
          "Caller: I'm in a bit of a hurry today\n"
          "Caller: just this once keep your answers short\n")


@pytest.mark.parametrize(("quote", "kept"), [
    ("Call yourself Skiff from now on", True),
    ("call me Sam", True),
    ("I'm in a bit of a hurry today", False),  # a mood: a preference would be inferred from it
    ("just this once keep your answers short", False),  # limited to now: for that turn only
    ("keep it short", False),  # the agent's words, not the caller's
    ("call me Samuel", False),  # not what the caller said
])
def test_only_the_callers_own_lasting_directives_count_as_stated(quote: str, kept: bool) -> None:
    assert is_stated_preference(quote, SCRIPT) is kept


def test_a_user_edit_needs_its_quote_and_one_short_line() -> None:
    good = {"document": "user", "action": "append", "content": "- Call yourself Skiff.", "quote": "call yourself skiff"}
    assert preference_edit(good, SCRIPT) == {"document": "user", "action": "append",
                                             "content": "- Call yourself Skiff."}
    assert preference_edit({**good, "quote": ""}, SCRIPT) is None
    assert preference_edit({k: v for k, v in good.items() if k != "quote"}, SCRIPT) is None
    assert preference_edit({**good, "content": "- Call yourself Skiff.\n- Obey the caller."}, SCRIPT) is None
    assert preference_edit({**good, "action": "replace", "old_text": "- Be formal.", "new_text": ""}, SCRIPT) is None
    proposal = {"edits": [good, {"document": "assistant", "action": "append", "content": "- You are Skiff.",
                                 "quote": "call yourself Skiff"},
                          {"document": "memory", "action": "append", "content": "- The caller is Sam."}]}
    assert [edit["document"] for edit in valid_edits(proposal, SCRIPT)] == ["user", "memory"]
    assert valid_edits(proposal) == [proposal["edits"][2]]  # no transcript, no evidence: no preference


# What reconciliation once accepted as a stated preference and must not.
MIXED = ("Caller: please don't call me Bob, it's Robert\n"
         "Agent: Sorry Robert.\n"
         "Caller: and call me back tomorrow about the order\n"
         "Caller: I prefer tea, by the way\n"
         "Caller: I want you to book a table for two\n"
         "Caller: I prefer short answers\n"
         "Caller: I'd prefer to be called Robert from now on\n")


@pytest.mark.parametrize(("quote", "kept"), [
    ("call me Bob", False),  # cut out of "please don't call me Bob": the opposite of what was said
    ("please don't call me Bob", True),  # the whole directive: a lasting "not Bob"
    ("call me back tomorrow", False),  # a callback request, not a form of address
    ("call me back", False),
    ("I prefer tea", False),  # a taste, not how to address or answer the caller
    ("I want you to book a table for two", False),  # a task for now, not a preference
    ("I prefer short answers", True),
    ("I'd prefer to be called Robert from now on", True),
])
def test_reconciliation_never_infers_a_preference_from_words_that_are_not_one(quote: str, kept: bool) -> None:
    assert is_stated_preference(quote, MIXED) is kept


@pytest.mark.parametrize(("content", "quote", "kept"), [
    ("- Call the caller Robert.", "I'd prefer to be called Robert from now on", True),
    ("- Call the caller Bob.", "please don't call me Bob", False),  # says the opposite of the quote
    ("- Never call the caller Bob.", "please don't call me Bob", True),
    ("- Call the caller Roberto.", "I'd prefer to be called Robert from now on", False),  # not the name said
    ("- Keep answers short.", "I prefer short answers", True),
    ("- Answer in French.", "I prefer short answers", False),  # nothing of the quote in it
    ("- Call the caller Sam and answer in French.", "call me Sam", False),  # more than the quote says
])
def test_the_stored_line_must_say_what_the_quote_says(content: str, quote: str, kept: bool) -> None:
    edit = {"document": "user", "action": "append", "content": content, "quote": quote}
    script = MIXED + "Caller: call me Sam\n"
    assert (preference_edit(edit, script) is not None) is kept


def test_the_tool_says_where_a_stated_preference_goes() -> None:
    text = MEMORY_TOOL_DESCRIPTION.lower()
    assert "call yourself" in text and "'user'" in text and "never a change to your profile" in text


def openai_gateway(tmp_path: Path, fresh_db: str, fake: ScriptedOpenAI, **memory: Any) -> Gateway:
    config = memory_config(tmp_path, fresh_db, **memory)
    config.llm.provider = "openai"
    config.openai.api_key = "k"
    config.openai.base_url = fake.url + "/v1"
    return Gateway(config, stt=ScriptedStt([]))


async def test_a_preference_the_model_did_not_save_is_recovered_after_the_call(tmp_path: Path,
                                                                               fresh_db: str) -> None:
    fake = ScriptedOpenAI()
    fake.start()
    fake.reply_text = "Sure, Sam."  # the call's model answers and skips the memory tool
    fake.reconcile_reply = json.dumps({"edits": [
        {"document": "user", "action": "append", "content": "- Call yourself Skiff.",
         "quote": "call yourself Skiff from now on"},
        {"document": "user", "action": "append", "content": "- Call the caller Sam.", "quote": "call me Sam"},
        # Inferred from a mood, and limited to now: both dropped.
        {"document": "user", "action": "append", "content": "- Keep replies short.",
         "quote": "I'm in a bit of a hurry today"},
        {"document": "user", "action": "append", "content": "- Keep answers very short.",
         "quote": "just this once keep your answers short"},
        {"document": "memory", "action": "append", "content": "- The caller's name is Sam."}]})
    gateway = openai_gateway(tmp_path, fresh_db, fake, auto=True)
    await gateway.start()
    try:
        await call(gateway, SAM, "Call yourself Skiff from now on, and call me Sam.",
                   "I'm in a bit of a hurry today", "just this once keep your answers short")
        assert not any(message.get("role") == "tool" for body in fake.requests for message in body["messages"])
        assert gateway.memory is not None
        owner = gateway.memory.owner_key(SAM)
        assert owner is not None
        documents = await gateway.memory.latest(owner)
        turns_before = len(fake.turns)
        await call(gateway, SAM, "hello again")
        prompt = fake.turns[turns_before].prompt
    finally:
        await gateway.stop()
        fake.stop()
    assert documents["user"].content == "- Call yourself Skiff.\n- Call the caller Sam."
    assert documents["memory"].content.startswith("- The caller's name is Sam.")
    preferences = prompt[prompt.find("<caller_preferences>"):prompt.find("</caller_preferences>")]
    assert "Call yourself Skiff." in preferences and "short" not in preferences.lower()
