"""The program a Piper worker process runs: Piper's own command line, with onnxruntime's threads told to
sleep when they have no work instead of spinning.

onnxruntime's default thread pool keeps its idle threads spinning for a while after every operator, and
Piper creates its session with the defaults. Measured on this project's 2-core machine (20 long sentences,
bench/speech/recognition.py's voice): 6.6 s of CPU for 3.9 s of wall time by default, 5.8 s for 3.5 s without the
spinning. On a loaded node that spinning takes a core from every other caller's recognition and synthesis.

Run as a script (`python -P piper_launch.py -m VOICE ...`, the same arguments as `python -m piper`): it is a
separate program that starts Piper, so voicegate itself never imports Piper (GPL-3.0-or-later). It imports
only onnxruntime, changes the options every new session starts from, and hands the process to Piper's
`__main__` as `-m piper` would.

It also gives each session the intra-op thread count the server asks for (internal/tts/piper_pool.py: by
default one for each per-core worker and a thread per core for the two wide workers of a quiet node; 0:
onnxruntime's own). On a loaded node with a Piper worker per core, one thread each cost 77-88 ms of CPU per
second of speech against 91-112 ms, and finished sooner (docs/performance.md, "Capacity once the turn is fast").
"""

from __future__ import annotations

import os
import runpy
import sys

# onnxruntime's intra-op threads per session (piper.threads); unset or 0: its default, one per core. Not a
# VOICEGATE_ name: those are the server's config keys.
THREADS_ENV = "PIPER_LAUNCH_INTRA_OP_THREADS"


def quiet_session_options(intra_op_threads: int = 0) -> None:
    import onnxruntime

    original = onnxruntime.SessionOptions

    def options() -> object:
        made = original()
        made.add_session_config_entry("session.intra_op.allow_spinning", "0")
        made.add_session_config_entry("session.inter_op.allow_spinning", "0")
        if intra_op_threads > 0:
            made.intra_op_num_threads = intra_op_threads
        return made

    onnxruntime.SessionOptions = options  # type: ignore[assignment,misc]


if __name__ == "__main__":
    # Started without -P, the script's directory would come first on sys.path, and its piper.py
    # (voicegate's adapter) would be found instead of Piper.
    here = sys.path[0] if sys.path else ""
    if here and __file__.startswith(here.rstrip("/") + "/"):
        sys.path.pop(0)
    quiet_session_options(int(os.environ.get(THREADS_ENV, "0") or 0))
    sys.argv[0] = "piper"
    runpy.run_module("piper", run_name="__main__", alter_sys=True)
