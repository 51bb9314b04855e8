"""Load: sipp places calls at 10 calls/s, 30 at a time, each streaming audio both ways. Every call
completes, no session is left, and open files and asyncio tasks return to where they were.

`make test` places 60 calls (six seconds of arrivals: the concurrency limit is reached and held);
`make soak` places 3000 (ten times the full size of 300; tests/scale.py)."""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

import pytest

from tests.pipeline.conftest import ScriptedStt
from tests.scale import scaled
from tests.sip.conftest import eventually, free_port, run_sipp
from tests.speech import telephone
from voicegate.internal.config import load_config
from voicegate.server.gateway import Gateway

pytestmark = pytest.mark.slow

CALLS, RATE, LIMIT = scaled(60, 300), 10, 30
TEMPLATE = Path(__file__).parent / "uac_rtp_stream.xml"


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_calls_at_ten_a_second_leave_nothing_behind(tmp_path: Path) -> None:
    from voicegate.internal.audio.g711 import ulaw_encode

    audio = tmp_path / "caller.ulaw"
    audio.write_bytes(ulaw_encode(telephone("what time is it")))
    scenario = tmp_path / "load.xml"
    text = TEMPLATE.read_text()
    scenario.write_text(text.replace("AUDIO_FILE", str(audio)).replace("PAYLOAD_TYPE", "0")
                        .replace("TALK_MS", "2500"))

    config = load_config(None)
    config.server.data_dir = str(tmp_path / "data")
    config.sip.bind = f"127.0.0.1:{free_port()}"
    base = random.Random(str(tmp_path)).randrange(30000, 58000, 2)
    config.sip.rtp_port_min, config.sip.rtp_port_max = base, base + 1000
    config.sip.invite_rate_per_min = 0
    # What is measured is what 60 calls leave behind, not whether this node should take them: admission
    # control (tests/test_admission.py, tests/sip_calls/test_admission.py) refuses some with a 503 on a
    # machine the other test worker keeps busy, and sipp counts a refused call as failed.
    config.admission.enabled = False
    config.pipeline.greeting = "Hello, thanks for calling."
    gateway = Gateway(config, stt=ScriptedStt([]))
    await gateway.start()
    try:
        await asyncio.sleep(0.5)
        files_before, tasks_before = open_files(), len(asyncio.all_tasks())
        target = f"127.0.0.1:{config.sip.bind_port}"
        result = await run_sipp(tmp_path, scenario, target, timeout=180 * max(1, CALLS // 300),
                                extra=["-m", str(CALLS), "-r", str(RATE), "-l", str(LIMIT), "-trace_stat",
                                       "-fd", "5"])
        result.check()
        assert gateway.sessions is not None
        await eventually(lambda: len(gateway.sessions) == 0, timeout=60, what="every session to end")  # type: ignore[arg-type]
        await asyncio.sleep(1.0)
        assert open_files() <= files_before + 5, f"open files grew from {files_before} to {open_files()}"
        assert len(asyncio.all_tasks()) <= tasks_before + 5
        assert gateway.sip_calls is not None and gateway.sip_calls.calls == {}
    finally:
        await gateway.stop()
    stats = sorted(tmp_path.glob("*_.csv"))
    if stats:  # sipp's own account: the last line's failed-call counter is 0
        rows = stats[-1].read_text().splitlines()
        header, last = rows[0].split(";"), rows[-1].split(";")
        assert int(last[header.index("FailedCall(C)")]) == 0
        assert int(last[header.index("SuccessfulCall(C)")]) == CALLS
