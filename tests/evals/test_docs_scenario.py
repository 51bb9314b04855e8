"""The scenario docs/evals.md teaches with, as written there, run against a server that is already
running (as a deployer's staging server would be) on both transports, through `--target`."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, free_port, run_cli
from tests.speech import NEURAL_CACHE

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("evals"), pytest.mark.timeout(900)]

API_KEY = "docs-scenario-api-key-0123456789"
MARK = "<!-- tests/evals/test_docs_scenario.py runs the scenario below, as written, on both transports. -->"


def scenario_from_the_docs() -> str:
    text = (REPO / "docs" / "evals.md").read_text()
    found = re.search(re.escape(MARK) + r"\s*```yaml\n(.*?)```", text, re.S)
    assert found, "docs/evals.md lost its tested scenario"
    return found.group(1)


@pytest.fixture
def staging(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`voicegate serve` from a config a deployer would write by following docs/evals.md."""
    http, sip = free_port(), free_port()
    config = tmp_path / "staging.toml"
    config.write_text(f"""
[server]
host = "127.0.0.1"
port = {http}
data_dir = "{tmp_path / 'data'}"
api_key = "{API_KEY}"
jwt_secret = "docs-scenario-jwt-secret-0123456789"
call_events = true
whip_rate_per_min = 0

[sip]
bind = "127.0.0.1:{sip}"
transports = ["udp"]
trusted_peers = ["127.0.0.1/32"]

[webrtc]
ice_hosts = ["127.0.0.1"]
""")
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "voicegate", "--config", str(config), "serve"],
                                  stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        deadline = time.monotonic() + 240
        while "voicegate is ready." not in log.read_text(errors="replace"):
            assert server.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.25)
        yield f"sip:agent@127.0.0.1:{sip}", f"http://127.0.0.1:{http}"
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_the_scenario_in_the_docs_passes_on_both_transports_against_a_running_server(
        tmp_path: Path, staging: tuple[str, str]) -> None:
    path = tmp_path / "time.yaml"
    path.write_text(scenario_from_the_docs())
    junit = tmp_path / "eval.xml"
    sip, http = staging
    done = run_cli("eval", str(path), "--target", sip, "--target", http, "--api-key", API_KEY,
                   "--junit", str(junit), "--cache", str(NEURAL_CACHE), timeout=600)
    assert done.returncode == 0, f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-2000:]}"
    assert "starting voicegate" not in done.stderr  # it used the running server
    suites = {suite.get("name"): suite for suite in ET.parse(junit).getroot().findall("testsuite")}
    assert set(suites) == {"tells the time and says goodbye [sip]", "tells the time and says goodbye [webrtc]"}
    for suite in suites.values():
        assert suite.get("failures") == "0" and suite.get("errors") == "0"
        checks = "\n".join(case.findtext("system-out") or "" for case in suite.iter("testcase"))
        for expected in ("✓ said /it's \\d/", "✓ tool end_call", "✓ greeted /how can i help/",
                         "✓ ended by the agent", "✓ caller recognised", "✓ voice to voice <= 8000 ms"):
            assert expected in checks, checks
