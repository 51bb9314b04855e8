"""A real browser (headless Chromium) uses the page: Call, speak, see the transcript and the reply."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.webrtc.harness import live_server, wait_until
from voicegate.internal.config import Config
from voicegate.internal.config.providers import PocketsphinxConfig
from voicegate.internal.stt.pocketsphinx import PocketsphinxSpeechToText

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(autouse=True)
def _chromium_installed() -> None:
    # Not a skip: `make test` installs it, so its absence is a broken set-up, not a reason to pass.
    assert Path(CHROMIUM).exists(), "Debian's chromium is not installed (make test installs it)"
ARTIFACTS = REPO / "test-artifacts"
CALLER_PHRASES = ["say hello world", "what time is it", "goodbye", "my name is sam"]
UI_TIMEOUT_MS = 60_000
# docs/quickstart.md shows this screenshot; `VOICEGATE_UPDATE_SCREENSHOTS=1 pytest ...` rewrites it.
QUICKSTART_SCREENSHOT = REPO / "docs" / "images" / "quickstart-call.png"
# Read at import: an autouse fixture hides every VOICEGATE_* variable from the tests themselves.
UPDATE_SCREENSHOTS = os.environ.get("VOICEGATE_UPDATE_SCREENSHOTS") == "1"


def chromium_flags(wav: Path) -> list[str]:
    return [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav.resolve()}%noloop", "--allow-loopback-in-peer-connection",
        "--disable-features=WebRtcHideLocalIpsWithMdns",
    ]


@contextlib.asynccontextmanager
async def browser_page(playwright: Any, tmp_path: Path, wav: Path) -> AsyncIterator[Any]:
    """A page in headless Chromium whose microphone plays `wav`; the profile is removed afterwards."""
    browser = await playwright.chromium.launch_persistent_context(
        str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=chromium_flags(wav))
    try:
        yield browser.pages[0] if browser.pages else await browser.new_page()
    finally:
        await browser.close()
        shutil.rmtree(tmp_path / "profile", ignore_errors=True)


@pytest.fixture
async def pocketsphinx() -> AsyncIterator[PocketsphinxSpeechToText]:
    engine = PocketsphinxSpeechToText(PocketsphinxConfig(phrases=CALLER_PHRASES, workers=1))
    yield engine
    await engine.aclose()


async def test_the_page_calls_and_shows_what_the_caller_said_and_the_agent_answered(
        config: Config, speech_wav: Callable[..., Path], pocketsphinx: PocketsphinxSpeechToText,
        tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    config.pipeline.greeting = "Hello there."
    wav = speech_wav("say hello world", lead_ms=2500, tail_ms=6000)
    async with live_server(config, stt=pocketsphinx) as server, async_playwright() as playwright:
        async with browser_page(playwright, tmp_path, wav) as page:
            problems: list[str] = []
            page.on("pageerror", lambda error: problems.append(str(error)))
            await page.goto(server.url + "/")
            await page.get_by_role("button", name="Call").click()

            transcript = page.locator("#transcript")
            await transcript.locator(".line.user", has_text="hello world").wait_for(timeout=UI_TIMEOUT_MS)
            await transcript.locator(".line.agent", has_text="Hello world.").wait_for(timeout=UI_TIMEOUT_MS)
            await page.locator("#connection", has_text="Connected").wait_for(timeout=UI_TIMEOUT_MS)
            await page.locator("#timings tr").first.wait_for(timeout=UI_TIMEOUT_MS)
            assert await page.get_by_role("button", name="Hang up").is_visible()

            await page.get_by_label("Type a turn").fill("what time is it")
            await page.get_by_role("button", name="Send").click()
            await transcript.locator(".line.user", has_text="what time is it").wait_for(timeout=UI_TIMEOUT_MS)

            ARTIFACTS.mkdir(exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / "webrtc-page-call.png"), full_page=True)
            assert len(server.sessions) == 1
            await page.get_by_role("button", name="Hang up").click()
            await page.get_by_role("button", name="Call").wait_for(timeout=UI_TIMEOUT_MS)
            await wait_until(lambda: len(server.sessions) == 0, what="the DELETE to end the session")
            assert problems == []


async def test_the_quickstart_call_asks_the_time_and_the_page_lists_what_the_offline_agent_understands(
        config: Config, speech_wav: Callable[..., Path], pocketsphinx: PocketsphinxSpeechToText,
        tmp_path: Path) -> None:
    """docs/quickstart.md, step 2: open the page, press Call, say "what time is it", read the answer."""
    from playwright.async_api import async_playwright

    from voicegate.internal.llm.local import LocalAgent

    config.llm.provider = "local"
    config.pipeline.greeting = "Hello there."
    wav = speech_wav("what time is it", lead_ms=2500, tail_ms=6000)
    async with live_server(config, stt=pocketsphinx) as server, async_playwright() as playwright:
        async with browser_page(playwright, tmp_path, wav) as page:
            problems: list[str] = []
            page.on("pageerror", lambda error: problems.append(str(error)))
            await page.goto(server.url + "/")
            panel = page.get_by_role("region", name="What this offline agent understands")
            await panel.wait_for(timeout=UI_TIMEOUT_MS)
            listed = LocalAgent().understands(memory_enabled=False, transfer_targets=[])
            shown = await panel.locator("li q").all_inner_texts()
            assert shown == [capability.example for capability in listed]
            assert "What time is it?" in shown and "Repeat after me: the parcel arrived on Monday." in shown
            assert await panel.locator("li[data-intent=recall] .needs").inner_text() == \
                " (needs memory)"

            await page.get_by_role("button", name="Call").click()
            transcript = page.locator("#transcript")
            await transcript.locator(".line.user", has_text="what time is it").wait_for(timeout=UI_TIMEOUT_MS)
            await transcript.locator(".line.agent", has_text="It's").wait_for(timeout=UI_TIMEOUT_MS)
            await page.locator("#timings tr").first.wait_for(timeout=UI_TIMEOUT_MS)

            ARTIFACTS.mkdir(exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / "quickstart-call.png"), full_page=True)
            if UPDATE_SCREENSHOTS:
                QUICKSTART_SCREENSHOT.parent.mkdir(exist_ok=True)
                shutil.copyfile(ARTIFACTS / "quickstart-call.png", QUICKSTART_SCREENSHOT)
            await page.get_by_role("button", name="Hang up").click()
            await wait_until(lambda: len(server.sessions) == 0, what="the DELETE to end the session")
            assert problems == []


async def test_the_page_hides_the_offline_agent_panel_when_another_model_answers(
        config: Config, speech_wav: Callable[..., Path], tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    from tests.pipeline.conftest import ScriptedStt

    config.llm.provider = "openai"
    config.openai.api_key = "sk-not-a-real-key-for-this-test"
    wav = speech_wav("goodbye", lead_ms=30_000, tail_ms=0)
    async with live_server(config, stt=ScriptedStt([])) as server, async_playwright() as playwright:
        async with browser_page(playwright, tmp_path, wav) as page:
            async with page.expect_response(lambda response: response.url.endswith("/api/agent")) as answer:
                await page.goto(server.url + "/")
            assert (await (await answer.value).json()) == {"llm": "openai"}
            await page.wait_for_load_state("networkidle")  # agent.js has had its answer and acted on it
            assert await page.locator("#agent-panel").is_hidden()
            assert await page.locator("#agent-understands li").count() == 0


async def test_dev_sign_in_then_a_reload_resumes_the_same_conversation(
        config: Config, speech_wav: Callable[..., Path], tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    from tests.pipeline.conftest import ScriptedStt

    config.server.jwt_secret = "a-development-secret-of-enough-length"
    config.server.dev_login = True
    wav = speech_wav("goodbye", lead_ms=60_000, tail_ms=0)  # a quiet microphone
    async with live_server(config, stt=ScriptedStt([])) as server, async_playwright() as playwright:
        async with browser_page(playwright, tmp_path, wav) as page:
            await page.goto(server.url + "/")
            await page.get_by_label("Sign in as").fill("alice")
            await page.get_by_role("button", name="Sign in").click()
            await page.locator("#who", has_text="alice").wait_for(timeout=UI_TIMEOUT_MS)
            await page.get_by_role("button", name="Call").click()
            await page.locator("#connection", has_text="Connected").wait_for(timeout=UI_TIMEOUT_MS)
            await page.get_by_label("Type a turn").fill("say hello world")
            await page.get_by_role("button", name="Send").click()
            await page.locator("#transcript .line.agent", has_text="Hello world.").wait_for(timeout=UI_TIMEOUT_MS)
            (session,) = server.sessions.sessions()
            assert session.resource_id == "jwt:alice"

            await page.reload()  # the tab's connection goes away; its resume token stays in sessionStorage
            await wait_until(lambda: session.attached == 0, what="the server noticing the reload")
            await page.get_by_role("button", name="Call").click()
            await page.locator("#connection", has_text="resumed").wait_for(timeout=UI_TIMEOUT_MS)
            assert server.sessions.sessions() == [session] and session.attached == 1
            await page.get_by_label("Type a turn").fill("say hello world")
            await page.get_by_role("button", name="Send").click()
            await wait_until(lambda: session.conversation.turns == 2, what="the second turn")
            ARTIFACTS.mkdir(exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / "webrtc-page-resumed.png"), full_page=True)


async def test_the_page_on_the_offline_defaults_understands_a_neural_voice(
        config: Config, tmp_path: Path) -> None:
    """Whisper (no grammar, no vocabulary) hears Piper's voice through Chromium's microphone; Piper answers."""
    from playwright.async_api import async_playwright

    from tests.speech import neural, write_wav
    from tests.webrtc.conftest import WAV_RATE, room_noise
    from voicegate.internal.stt.whisper import WhisperSpeechToText

    config.tts.provider = "auto"
    config.piper.workers = 1
    config.whisper.workers = 1
    speech = neural(["Repeat after me, the parcel arrived on Monday."], WAV_RATE)[0]
    wav = write_wav(tmp_path / "neural.wav", room_noise(2500) + speech + room_noise(6000, seed=2), WAV_RATE)
    whisper = WhisperSpeechToText(config.whisper, tmp_path / "models")
    try:
        async with live_server(config, stt=whisper) as server, async_playwright() as playwright:
            assert server.gateway.tts is not None and server.gateway.tts.name == "piper"
            async with browser_page(playwright, tmp_path, wav) as page:
                await page.goto(server.url + "/")
                await page.get_by_role("button", name="Call").click()
                transcript = page.locator("#transcript")
                user = transcript.locator(".line.user", has_text="parcel arrived on Monday")
                try:
                    await user.wait_for(timeout=UI_TIMEOUT_MS)
                except Exception as exc:
                    raise AssertionError(f"the page shows: {await transcript.inner_text()!r}") from exc
                agent = transcript.locator(".line.agent", has_text="parcel arrived on Monday")
                await agent.wait_for(timeout=UI_TIMEOUT_MS)
                await page.get_by_role("button", name="Hang up").click()
                await wait_until(lambda: len(server.sessions) == 0, what="the DELETE to end the session")
    finally:
        await whisper.aclose()
