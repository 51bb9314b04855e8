"""bench/realtime/latency.py: a short real run (a SIP call and a WebRTC call to `voicegate serve` with the Realtime
agent, the fake Realtime server in stub mode) prints sane figures both ways for both transports, and its pairing
of onsets with arrivals. No timing is asserted: the figures are for docs/performance.md, from a quiet machine."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

from bench.common.figures import RESULTS
from bench.realtime.latency import Samples, figures, pair_up
from tests.conftest import REPO

NAME = "realtime-latency-pytest"


def test_each_onset_is_paired_with_the_first_loud_arrival_after_it() -> None:
    arrivals = [(0.990, -120.0), (1.004, -60.0), (1.012, -13.0), (1.032, -13.0), (2.020, -20.0), (5.6, -13.0)]
    found, lost = pair_up([1.0, 2.0, 3.5], arrivals)
    assert [round(ms) for ms in found] == [12, 20] and lost == 1  # 3.5: nothing loud within 2 s
    result = figures(Samples(inbound=[10.0, 20.0, 30.0], outbound=[], lost=1))
    assert result["inbound"]["n"] == 3 and result["inbound"]["max"] == 30.0 and result["lost"] == 1
    assert math.isnan(result["outbound"]["p95"])


def test_a_short_run_prints_both_directions_for_both_transports() -> None:
    try:
        run = subprocess.run([sys.executable, "-m", "bench.realtime.latency", "--turns", "3", "--name", NAME],
                             cwd=REPO, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
        assert "turn 3/3" in run.stderr  # progress, per turn
        rows = {}
        for line in run.stdout.splitlines():
            match = re.match(r"(sip|webrtc)\s+(inbound|outbound)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", line)
            if match:
                transport, direction, n, p50, p95, worst = match.groups()
                rows[transport, direction] = (int(n), float(p50), float(p95), float(worst))
        assert set(rows) == {(t, d) for t in ("sip", "webrtc") for d in ("inbound", "outbound")}, run.stdout
        for (n, p50, p95, worst) in rows.values():
            assert n >= 2  # a turn may be lost on a loaded machine, not most of them
            assert 0 < p50 <= p95 <= worst < 2000  # ms: positive, ordered, and an onset found, not a later one
        saved = json.loads((RESULTS / f"{NAME}.json").read_text())
        assert set(saved["results"]) == {"sip", "webrtc"}
    finally:
        (RESULTS / f"{NAME}.json").unlink(missing_ok=True)
