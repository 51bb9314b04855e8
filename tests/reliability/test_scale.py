"""`make soak` runs the soak-sized tests at ten times their full size: the timeouts must grow with it."""

import subprocess
import sys
from pathlib import Path

from tests.scale import scaled, scaled_timeout
from tests.sip.conftest import free_media_ports

ROOT = Path(__file__).resolve().parents[2]


def test_the_timeout_grows_with_the_soak_factor() -> None:
    assert scaled_timeout(300, 1) == 300
    assert scaled_timeout(300, 10) == 3000
    assert scaled_timeout(300, 0) == 300  # an unset or zero factor is the CI size


def test_make_test_runs_the_ci_size_and_make_soak_ten_times_the_full_size() -> None:
    assert scaled(60, 300, soak=1) == 60
    assert scaled(60, 300, soak=0) == 60
    assert scaled(60, 300, soak=10) == 3000


def test_under_make_soak_each_soak_test_gets_the_scaled_timeout(tmp_path: Path) -> None:
    # Collect as `make soak` does (`-m soak`) and read the timeout each test would run under: pytest's
    # 300 s, or the test's own (test_kamailio.py's 420 s), times ten; a test not marked `soak` is left out.
    probe = tmp_path / "conftest_probe.py"
    probe.write_text(
        "import pytest\n"
        "def pytest_collection_finish(session):\n"
        "    for item in session.items:\n"
        "        marker = item.get_closest_marker('timeout')\n"
        "        print('TIMEOUT', item.nodeid, marker.args[0] if marker else None)\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "conftest_probe", "-p", "no:cacheprovider",
         "-m", "soak", "tests/reliability/test_sip_load.py", "tests/cluster/test_kamailio.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path}:{ROOT}", "VOICEGATE_SOAK": "10",
             "HOME": str(tmp_path)})
    timeouts = dict(line.split()[1:] for line in result.stdout.splitlines() if line.startswith("TIMEOUT"))
    assert timeouts == {
        "tests/reliability/test_sip_load.py::test_calls_at_ten_a_second_leave_nothing_behind": "3000.0",
        "tests/cluster/test_kamailio.py::test_calls_through_kamailio_all_succeed_and_both_nodes_take_some":
            "4200.0",
    }, result.stdout + result.stderr


def test_sipp_media_ports_stay_valid_for_a_soak_sized_run() -> None:
    # sipp offers P + (4 * (call - 1)) % 10000 as each call's media port: at 3000 calls every one of those
    # (and its RTCP and video neighbours) must still be a port, or the server refuses the call's SDP.
    for _ in range(200):
        base = free_media_ports()
        assert base + max(4 * (call - 1) % 10000 for call in range(1, 3001)) + 3 <= 65535, base
