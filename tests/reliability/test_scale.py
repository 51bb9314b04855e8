"""`make soak` runs this suite at ten times its size: the timeouts must grow with it."""

import subprocess
import sys
from pathlib import Path

from tests.reliability.scale import scaled_timeout
from tests.sip.conftest import free_media_ports

ROOT = Path(__file__).resolve().parents[2]


def test_the_timeout_grows_with_the_soak_factor() -> None:
    assert scaled_timeout(300, 1) == 300
    assert scaled_timeout(300, 10) == 3000
    assert scaled_timeout(300, 0) == 300  # an unset or zero factor is the CI size


def test_under_make_soak_each_reliability_test_gets_the_scaled_timeout(tmp_path: Path) -> None:
    # Collect the suite as `make soak` does and read the timeout each test would run under.
    probe = tmp_path / "conftest_probe.py"
    probe.write_text(
        "import pytest\n"
        "def pytest_collection_finish(session):\n"
        "    for item in session.items:\n"
        "        marker = item.get_closest_marker('timeout')\n"
        "        print('TIMEOUT', item.nodeid, marker.args[0] if marker else None)\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "conftest_probe", "-p", "no:cacheprovider",
         "tests/reliability/test_sip_load.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path}:{ROOT}", "VOICEGATE_SOAK": "10",
             "HOME": str(tmp_path)})
    lines = [line for line in result.stdout.splitlines() if line.startswith("TIMEOUT")]
    assert lines, result.stdout + result.stderr
    assert all(line.endswith(" 3000.0") for line in lines), lines


def test_sipp_media_ports_stay_valid_for_a_soak_sized_run() -> None:
    # sipp offers P + (4 * (call - 1)) % 10000 as each call's media port: at 3000 calls every one of those
    # (and its RTCP and video neighbours) must still be a port, or the server refuses the call's SDP.
    for _ in range(200):
        base = free_media_ports()
        assert base + max(4 * (call - 1) % 10000 for call in range(1, 3001)) + 3 <= 65535, base
