"""The project's own end-to-end regression suite: `voicegate eval examples/evals`, as a user runs it,
against the offline defaults (Whisper, Piper, the built-in agent, Silero and Smart Turn, memory in an
embedded PostgreSQL), over real SIP and WebRTC calls; and its HTML report opened in a real browser."""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.speech import NEURAL_CACHE
from tests.webrtc.test_browser import CHROMIUM

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("evals"), pytest.mark.timeout(1200)]

EXAMPLES = REPO / "examples" / "evals"
ARTIFACTS = REPO / "test-artifacts"
# docs/evals.md shows the report; `VOICEGATE_UPDATE_SCREENSHOTS=1 pytest ...` rewrites this picture.
REPORT_SCREENSHOT = REPO / "docs" / "images" / "eval-report.png"
UPDATE_SCREENSHOTS = os.environ.get("VOICEGATE_UPDATE_SCREENSHOTS") == "1"


class Run:
    def __init__(self, done: subprocess.CompletedProcess[str], junit: Path, html: Path) -> None:
        self.done, self.junit, self.html = done, junit, html


@pytest.fixture(scope="module")
def example_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    out = tmp_path_factory.mktemp("eval")
    junit, html = out / "eval.xml", out / "eval.html"
    done = run_cli("eval", str(EXAMPLES), "--jobs", "3", "--junit", str(junit), "--html", str(html),
                   "--cache", str(NEURAL_CACHE), timeout=1100)
    yield Run(done, junit, html)


def test_the_examples_pass_against_the_offline_defaults(example_run: Run) -> None:
    done = example_run.done
    assert done.returncode == 0, f"stdout:\n{done.stdout[-6000:]}\nstderr:\n{done.stderr[-3000:]}"
    root = ET.parse(example_run.junit).getroot()
    suites = {suite.get("file"): suite for suite in root.findall("testsuite")}
    assert {Path(str(name)).name for name in suites} == {path.name for path in EXAMPLES.glob("*.yaml")}
    assert root.get("failures") == "0" and root.get("errors") == "0"
    # Every example checks something in every turn; nothing passed for want of looking.
    for case in root.iter("testcase"):
        out = case.findtext("system-out") or ""
        if " turn " in str(case.get("name")):
            assert out.startswith("✓"), (case.get("name"), out)
    assert "0 failed" in done.stdout


async def test_the_html_report_opens_in_chromium_with_a_player_per_turn(example_run: Run, tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is not installed (make test installs it)"
    assert example_run.html.is_file(), example_run.done.stderr[-3000:]
    cases = ET.parse(example_run.junit).getroot().iter("testcase")
    turns = sum(1 for case in cases if " turn " in str(case.get("name")))
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--allow-file-access-from-files"])
        try:
            page = browser.pages[0] if browser.pages else await browser.new_page()
            problems: list[str] = []
            page.on("pageerror", lambda error: problems.append(str(error)))
            await page.goto(example_run.html.as_uri())
            players = page.locator("audio")
            assert await players.count() >= turns
            # Every player has loaded its recording's header: a real WAV the browser can play, with a length.
            await page.wait_for_function(
                "() => [...document.querySelectorAll('audio')].every(a => a.readyState >= 1 && a.duration > 0)",
                timeout=60_000)
            durations = await page.eval_on_selector_all("audio", "all => all.map(a => a.duration)")
            assert min(durations) > 0.3, durations
            assert await page.locator(".latency .bar").count() >= turns - 1
            assert await page.get_by_text("✗").count() == 0
            ARTIFACTS.mkdir(exist_ok=True)
            shot = ARTIFACTS / "eval-report.png"
            await page.set_viewport_size({"width": 1200, "height": 1400})
            await page.screenshot(path=str(shot), full_page=False)
            assert shot.stat().st_size > 10_000
            if UPDATE_SCREENSHOTS:
                shutil.copy(shot, REPORT_SCREENSHOT)
            assert not problems, problems
        finally:
            await browser.close()
