"""`voicegate serve` with speech recognition deaf, for the benchmarks that start whole node processes.

bench/sip/calls.py measures SIP + G.711 both ways + VAD, with a recogniser that hears nothing so no turn,
reply or "please repeat" ever starts; bench/sip/cluster_calls.py runs the same call shape in `voicegate
serve` subprocesses, so the node it starts is this: the real command line (config file, VOICEGATE_*
variables, every other engine as configured) with only the speech-to-text engine replaced.

    python -m bench.sip.deaf_node --config FILE serve
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import voicegate.server.gateway
from bench.sip.calls import DeafStt
from voicegate.internal.config import Config
from voicegate.internal.stt.base import SpeechToText
from voicegate.server.cli import main


def deaf(config: Config) -> SpeechToText:
    return DeafStt()  # type: ignore[return-value]  # a streaming engine in duck type, as sip_calls.py passes it


if __name__ == "__main__":
    # The gateway builds its recogniser through this name when none is given (the CLI gives none).
    voicegate.server.gateway.build_stt = deaf
    sys.exit(main())
