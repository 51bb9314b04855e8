"""The memory panel in headless Chromium: it shows the caller's memory, edits a line, and when the
memory changed meanwhile, it reloads and says so instead of overwriting; a change made while its
/api/events socket was down shows up as soon as the socket is back."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest

from tests.memory.test_api import SECRET
from tests.pipeline.conftest import ScriptedStt
from tests.webrtc.harness import live_server, webrtc_config
from tests.webrtc.proxy import CuttableProxy
from tests.webrtc.test_browser import ARTIFACTS, CHROMIUM, UI_TIMEOUT_MS, chromium_flags

pytestmark = pytest.mark.slow


async def test_the_memory_panel_edits_and_reloads_on_a_concurrent_change(tmp_path: Path,
                                                                          speech_wav) -> None:  # type: ignore[no-untyped-def]
    from playwright.async_api import async_playwright

    config = webrtc_config(tmp_path, jwt_secret=SECRET, dev_login=True, patch_rate_per_min=0)
    config.memory.enabled = True
    config.memory.provider = "memory"
    wav = speech_wav("goodbye", lead_ms=30_000, tail_ms=0)
    async with live_server(config, stt=ScriptedStt([])) as server, async_playwright() as playwright:
        browser = await playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=chromium_flags(wav))
        try:
            page = browser.pages[0] if browser.pages else await browser.new_page()
            await page.goto(server.url + "/")
            await page.get_by_label("Sign in as").fill("alice")
            await page.get_by_role("button", name="Sign in").click()
            await page.locator("#memory-status", has_text="revision 0").wait_for(timeout=UI_TIMEOUT_MS)
            token = await page.evaluate("window.voicegate.token()")
            headers = {"Authorization": f"Bearer {token}"}

            async def api_patch(**body: object) -> httpx.Response:
                async with httpx.AsyncClient(base_url=server.url) as http:
                    return await http.patch("/api/memory", headers=headers, json=body)

            # A change from elsewhere appears by itself (memory.changed over /api/events).
            await api_patch(document="memory", action="append", content="- Likes green tea.\n- Has a dog.")
            panel = page.locator("#memory-panel")
            await panel.locator("li", has_text="Has a dog.").wait_for(timeout=UI_TIMEOUT_MS)

            # Edit a line in the page.
            await panel.get_by_role("button", name="Edit: - Has a dog.").click()
            await panel.get_by_label("New text").fill("- Has two dogs.")
            await panel.get_by_role("button", name="Save").click()
            await panel.locator("li", has_text="Has two dogs.").wait_for(timeout=UI_TIMEOUT_MS)
            async with httpx.AsyncClient(base_url=server.url) as http:
                stored = (await http.get("/api/memory", headers=headers)).json()["documents"]["memory"]
            assert stored["content"] == "- Likes green tea.\n- Has two dogs." and stored["revision"] == 2

            # Start editing, let another client change the memory, then save: a 409 and a reload.
            await panel.get_by_role("button", name="Edit: - Likes green tea.").click()
            await api_patch(document="memory", action="append", content="- Lives in Lisbon.")
            await page.locator("#memory-notice", has_text="changed while you were editing").wait_for(
                timeout=UI_TIMEOUT_MS)
            await panel.get_by_label("New text").fill("- Likes black tea.")
            await panel.get_by_role("button", name="Save").click()
            await page.locator("#memory-notice", has_text="reloaded").wait_for(timeout=UI_TIMEOUT_MS)
            await panel.locator("li", has_text="Lives in Lisbon.").wait_for(timeout=UI_TIMEOUT_MS)
            async with httpx.AsyncClient(base_url=server.url) as http:
                stored = (await http.get("/api/memory", headers=headers)).json()["documents"]["memory"]
            assert "green tea" in stored["content"] and "black tea" not in stored["content"]

            # Delete a line.
            await panel.get_by_role("button", name="Delete: - Lives in Lisbon.").click()
            await panel.locator("li", has_text="Lives in Lisbon.").wait_for(state="detached", timeout=UI_TIMEOUT_MS)
            ARTIFACTS.mkdir(exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / "memory-panel.png"), full_page=True)
        finally:
            await browser.close()
            shutil.rmtree(tmp_path / "profile", ignore_errors=True)


async def test_a_change_made_while_the_events_socket_was_down_appears_when_it_reconnects(
        tmp_path: Path, speech_wav) -> None:  # type: ignore[no-untyped-def]
    from playwright.async_api import async_playwright

    config = webrtc_config(tmp_path, jwt_secret=SECRET, dev_login=True, patch_rate_per_min=0)
    config.memory.enabled = True
    config.memory.provider = "memory"
    wav = speech_wav("goodbye", lead_ms=30_000, tail_ms=0)
    async with live_server(config, stt=ScriptedStt([])) as server, CuttableProxy(server.port) as network, \
            async_playwright() as playwright:
        browser = await playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=chromium_flags(wav))
        try:
            page = browser.pages[0] if browser.pages else await browser.new_page()
            problems: list[str] = []
            page.on("pageerror", lambda error: problems.append(str(error)))
            await page.goto(network.url + "/")  # the page reaches the server only through the proxy
            await page.get_by_label("Sign in as").fill("alice")
            await page.get_by_role("button", name="Sign in").click()
            live = page.locator("#memory-live")
            await page.locator("#memory-live[data-state=open]").wait_for(timeout=UI_TIMEOUT_MS)
            token = await page.evaluate("window.voicegate.token()")

            async def api_append(content: str) -> None:  # straight to the server, never through the proxy
                async with httpx.AsyncClient(base_url=server.url) as http:
                    response = await http.patch("/api/memory", headers={"Authorization": f"Bearer {token}"},
                                                json={"document": "memory", "action": "append", "content": content})
                assert response.status_code == 200, response.text

            panel = page.locator("#memory-panel")
            await api_append("- Likes green tea.")
            await panel.locator("li", has_text="Likes green tea.").wait_for(timeout=UI_TIMEOUT_MS)

            network.cut()
            await page.locator("#memory-live[data-state=retrying]").wait_for(timeout=UI_TIMEOUT_MS)
            assert "reconnecting" in (await live.text_content() or "")
            await api_append("- Moved to Porto.")  # its memory.changed has no socket to reach the page by
            await page.wait_for_timeout(1500)  # at least one reconnect attempt fails while the network is cut
            assert await panel.locator("li", has_text="Moved to Porto.").count() == 0

            network.restore()
            await panel.locator("li", has_text="Moved to Porto.").wait_for(timeout=UI_TIMEOUT_MS)
            await page.locator("#memory-live[data-state=open]").wait_for(timeout=UI_TIMEOUT_MS)
            assert "revision 2" in (await page.locator("#memory-status").text_content() or "")
            await page.screenshot(path=str(tmp_path / "memory-panel-reconnected.png"), full_page=True)
            assert problems == []
        finally:
            await browser.close()
            shutil.rmtree(tmp_path / "profile", ignore_errors=True)
