"""`make bench`: every benchmark in turn, each printing its table and writing bench/results/*.json."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = [
    ["turn_latency.py", "--turns", "200", "--local"],
    ["speech.py"],
    # The short form of the noisy lines: 8 kHz, 15 dB, four noises (the full run: every noise, SNR and rate).
    ["speech.py", "--noise", "--conditions", "none,white15,street15,babble15,pink15", "--rates", "8000"],
    ["memory.py", "--scales", "10000,100000,1000000", "--samples", "500"],
    ["sip_calls.py", "--calls", "50,100,150,200,250,300", "--seconds", "10", "--repeat", "2", "--profile"],
    ["cluster_calls.py", "--calls", "100", "--seconds", "20"],
    ["rtp_media.py", "--calls", "100,200,400,800", "--seconds", "10"],
    ["rtp_media.py", "--calls", "400,800,1200", "--seconds", "10", "--bare"],
    ["webrtc_sessions.py", "--sessions", "4,8,10,12,16,20", "--seconds", "15", "--profile"],
    ["api_memory.py", "--clients", "20", "--seconds", "20"],
    # 12 turns of every kind (questions, greetings, thanks, yes/no, short questions and statements) over SIP,
    # then the same over WebRTC to voicegate and to Pipecat 1.14 side by side (the full runs: every turn).
    ["voice_to_voice.py", "--turns", "12", "--calls", "3"],
    ["voice_to_voice.py", "--reference", "pipecat", "--turns", "12", "--calls", "3"],
    # The short forms: two small steps over SIP, one over WebRTC, one through Kamailio to two nodes (the full
    # runs, bench/capacity.py alone: docs/performance.md "Capacity with real conversations").
    ["capacity.py", "--calls", "2,4", "--seconds", "30"],
    ["capacity.py", "--transport", "webrtc", "--calls", "2", "--seconds", "30"],
    ["capacity.py", "--nodes", "2", "--calls", "2", "--seconds", "30"],
    # The short form: one line's curves (docs/performance.md has the full run's lines and the barge-in run).
    ["turns.py", "curve", "--lines", "piper/8000/none", "--offsets", "120"],
    ["denoise.py", "--seconds", "10", "--repeat", "5"],
    ["recording.py", "--calls", "50", "--seconds", "60"],
    ["amd.py"],
]


def main() -> int:
    failed = 0
    for command in BENCHMARKS:
        script = HERE / command[0]
        if not script.exists():
            continue
        print(f"\n=== {command[0]} ===", flush=True)
        failed += subprocess.run([sys.executable, str(script), *command[1:]], cwd=HERE.parent).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
