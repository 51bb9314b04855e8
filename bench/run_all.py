"""`make bench`: every benchmark in turn, each printing its table and writing bench/results/*.json."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = [
    ["turn_latency.py", "--turns", "200", "--local"],
    ["memory.py", "--scales", "10000,100000,1000000", "--samples", "500"],
    ["webrtc_sessions.py", "--sessions", "2,4,6,8,10,20,40", "--seconds", "15", "--profile"],
    ["api_memory.py", "--clients", "20", "--seconds", "20"],
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
