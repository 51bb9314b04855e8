"""A menu prompt heard again whole by the menu's recogniser (internal/telephony/prompt_hearing.py): the
real Whisper base from its pinned packages, in its own worker process, on espeak-ng through G.711."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.speech import telephone
from voicegate.internal.config.providers import WhisperConfig
from voicegate.internal.telephony.menu import parse_menu
from voicegate.internal.telephony.prompt_hearing import PromptHearing

pytestmark = pytest.mark.slow

PROMPT = "Harbour Bank. For lost or stolen cards, press 1. For mortgages, press 2. For anything else, press 3."


async def test_a_whole_prompt_is_heard_by_the_menus_own_model(tmp_path: Path) -> None:
    ears = PromptHearing("base", 5, WhisperConfig(), tmp_path / "models")
    try:
        await ears.warm_up()
        heard = await ears.hear(telephone(PROMPT), 8000)
    finally:
        await ears.aclose()
    options = {option.key: option.label.lower() for option in parse_menu(heard)}
    assert "stolen" in options.get("1", "") and "mortgage" in options.get("2", ""), heard
    assert (tmp_path / "models").exists()  # base's model.bin, assembled from its two packages and checked


async def test_a_model_that_is_not_there_leaves_the_parts_and_says_why(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ears = PromptHearing(str(tmp_path / "no-such-model"), 5, WhisperConfig(download=False), tmp_path / "models")
    with caplog.at_level(logging.WARNING, logger="voicegate.internal.telephony.prompt_hearing"):
        await ears.warm_up()
        assert await ears.hear(telephone(PROMPT), 8000) == ""
    assert [r.getMessage() for r in caplog.records] == ["menu prompts are heard in parts only"]
    await ears.aclose()
