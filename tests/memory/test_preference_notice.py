"""The observed-preference priority notice (seed 000): preferences a provider observed, under an "Observed
preferences" heading, reach the model only with the notice that the caller's stated ones win."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.openai_fake import FakeOpenAI
from tests.memory.test_calls import SAM, call, documents, memory_config
from tests.pipeline.conftest import ScriptedStt
from voicegate.internal.llm.openai import OpenAIChatModel
from voicegate.internal.memory.injection import OBSERVED_NOTICE, memory_context, memory_text
from voicegate.internal.memory.provider import ChangeContext
from voicegate.server.gateway import Gateway

STATED = "- Call the caller Sam.\n- Keep replies short."
OBSERVED = "## Observed preferences\n- Seems to like detailed answers.\n- Often asks about weather."
USER = f"{STATED}\n\n{OBSERVED}"


def test_the_observed_heading_carries_the_priority_notice_and_stated_lines_do_not() -> None:
    block = memory_context(USER, "- The caller's name is Sam.", 2000)
    assert f"## Observed preferences {OBSERVED_NOTICE}\n- Seems to like detailed answers." in block
    assert block.count(OBSERVED_NOTICE) == 1
    assert "- Call the caller Sam.\n- Keep replies short." in block  # stated ones as they are
    assert OBSERVED_NOTICE in memory_text(USER, "", 2000)  # a BYO agent's memory field too


def test_a_plain_text_heading_gets_it_too_and_a_document_without_one_is_unchanged() -> None:
    plain = "Call the caller Sam.\nObserved preferences:\nLikes detailed answers."
    assert f"Observed preferences: {OBSERVED_NOTICE}\nLikes detailed answers." in memory_context(plain, "", 2000)
    assert OBSERVED_NOTICE not in memory_context(STATED, "- Fact.", 2000)
    # A preference line that merely mentions the words is not a heading.
    assert OBSERVED_NOTICE not in memory_context("- Observed preferences are not my thing.", "", 2000)


def test_an_observed_preference_is_never_shown_without_its_notice() -> None:
    # Room for the stated lines and a short observed line, not for the long heading with its notice: the
    # observed lines after it are left out too (a short one would otherwise fit and read as stated).
    for max_chars in range(60, 400, 7):
        block = memory_context(USER, "", max_chars)
        assert len(block) <= max_chars
        if "Often asks about weather" in block or "detailed answers" in block:
            assert OBSERVED_NOTICE in block
    assert "Keep replies short." in memory_context(USER, "", 150)


async def test_the_model_sees_the_notice_and_the_stored_document_stays_as_written(tmp_path: Path,
                                                                                 fresh_db: str) -> None:
    async with FakeOpenAI() as fake:
        config = memory_config(tmp_path, fresh_db)
        gateway = Gateway(config, stt=ScriptedStt([]),
                          model=OpenAIChatModel(config.openai, base_url=fake.url + "/v1", api_key="k"))
        await gateway.start()
        try:
            assert gateway.memory is not None
            owner = gateway.memory.owner_key(SAM)
            assert owner is not None
            await gateway.memory.edit(owner, "user", "append", content=USER, context=ChangeContext("api"))
            await call(gateway, SAM, "hello")
            system = fake.requests[0]["messages"][0]["content"]
            assert f"## Observed preferences {OBSERVED_NOTICE}" in system
            assert (await documents(gateway, SAM))["user"].strip() == USER  # API/tool reads: as written
        finally:
            await gateway.stop()
