"""`make bench`: every benchmark in turn, each printing its table and writing bench/results/*.json.

Each runs as `python -m MODULE ARGS` from the repository root (bench/README.md lists them); a module
that is not there is an error, not a benchmark quietly left out.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = [
    ["bench.turns.server_latency", "--turns", "200", "--local"],
    ["bench.speech.recognition"],
    # The short form of the noisy lines: 8 kHz, 15 dB, four noises (the full run: every noise, SNR and rate).
    ["bench.speech.noisy_lines", "--conditions", "none,white15,street15,babble15,pink15", "--rates", "8000"],
    ["bench.memory.latency", "--scales", "10000,100000,1000000", "--samples", "500"],
    ["bench.sip.calls", "--calls", "50,100,150,200,250,300", "--seconds", "10", "--repeat", "2", "--profile"],
    ["bench.sip.cluster_calls", "--calls", "100", "--seconds", "20"],
    ["bench.sip.rtp_media", "--calls", "100,200,400,800", "--seconds", "10"],
    ["bench.sip.rtp_media", "--calls", "400,800,1200", "--seconds", "10", "--bare"],
    ["bench.webrtc.sessions", "--sessions", "4,8,10,12,16,20", "--seconds", "15", "--profile"],
    ["bench.memory.control_plane", "--clients", "20", "--seconds", "20"],
    # 12 turns of every kind (questions, greetings, thanks, yes/no, short questions and statements) over SIP,
    # then the same over WebRTC to voicegate and to Pipecat 1.14 side by side (the full runs: every turn).
    ["bench.turns.voice_to_voice", "--turns", "12", "--calls", "3"],
    ["bench.turns.voice_to_voice", "--reference", "pipecat", "--turns", "12", "--calls", "3"],
    # The short forms: two small steps over SIP, one over WebRTC, one through Kamailio to two nodes (the full
    # runs, bench/capacity/conversations.py alone: docs/performance.md "Capacity with real conversations").
    ["bench.capacity.conversations", "--calls", "2,4", "--seconds", "30"],
    ["bench.capacity.conversations", "--transport", "webrtc", "--calls", "2", "--seconds", "30"],
    ["bench.capacity.conversations", "--nodes", "2", "--calls", "2", "--seconds", "30"],
    ["bench.capacity.overload", "--capacity", "2", "--seconds", "30"],
    # The short form: one line's curves (docs/performance.md has the full run's lines and the barge-in run).
    ["bench.turns.turn_taking", "curve", "--lines", "piper/8000/none", "--offsets", "120"],
    ["bench.speech.denoise", "--seconds", "10", "--repeat", "5"],
    ["bench.sip.recording", "--calls", "50", "--seconds", "60"],
    ["bench.sip.amd"],
    ["bench.turns.overlap"],
    ["bench.sip.menus", "--split", "heldout"],
    ["bench.realtime.latency", "--turns", "30"],
]


def missing() -> list[str]:
    """The modules BENCHMARKS names that are not in bench/ (a benchmark moved without this list)."""
    return sorted({module for module, *_ in BENCHMARKS if importlib.util.find_spec(module) is None})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="print the commands, run nothing")
    if parser.parse_args().list:
        print("\n".join(f"python -m {' '.join(command)}" for command in BENCHMARKS))
        return 0
    if gone := missing():
        print(f"bench/run_all.py names benchmarks that are not there: {', '.join(gone)}", file=sys.stderr)
        return 2
    failed = 0
    for module, *args in BENCHMARKS:
        print(f"\n=== {module} {' '.join(args)} ===", flush=True)
        failed += subprocess.run([sys.executable, "-m", module, *args], cwd=REPO).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
