"""baresip, a strict SIP stack, phones in with a WAV file and records what it hears."""

from __future__ import annotations

import asyncio
import contextlib
import random
import shutil
import wave
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from internal.audio.g711 import ulaw_decode, ulaw_encode
from tests.sip_calls.conftest import REPLY_PHRASES, ServerFactory, best_match, free_port, loud_part
from tests.speech import active_ms, speak, transcribe, write_wav

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _baresip_installed() -> None:
    # Not a skip: `make test` installs it, so its absence is a broken set-up, not a reason to pass.
    assert shutil.which("baresip") is not None, "baresip is not installed (apt: baresip-core; make test installs it)"

MODULES = ("g711.so", "aufile.so", "aubridge.so", "sndfile.so", "menu.so")


def baresip_home(directory: Path, wav: Path) -> Path:
    """A headless baresip: audio from `wav`, no sound card (aubridge plays into nothing), and the
    sndfile filter recording both directions into `directory`/recordings."""
    home = directory / "baresip"
    recordings = home / "recordings"
    recordings.mkdir(parents=True)
    rtp_low = random.randrange(40000, 59000) & ~1
    lines = [
        "poll_method epoll",
        f"sip_listen 127.0.0.1:{free_port()}",
        "net_interface 127.0.0.1",
        f"audio_source aufile,{wav}",
        "audio_player aubridge,nil",
        "audio_alert aubridge,nil",
        "audio_srate 8000",
        "audio_channels 1",
        f"rtp_ports {rtp_low}-{rtp_low + 40}",
        "module_path /usr/lib/baresip/modules",
        *(f"module {name}" for name in MODULES),
        "module_app account.so",
        f"snd_path {recordings}",
    ]
    (home / "config").write_text("\n".join(lines) + "\n")
    (home / "accounts").write_text("<sip:+15551234567@127.0.0.1>;regint=0\n")
    return home


class Baresip:
    """A baresip process and what it has printed so far."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.lines: list[str] = []

    def output(self) -> str:
        return "".join(self.lines)

    async def read(self) -> None:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            self.lines.append(line.decode(errors="replace"))


@contextlib.asynccontextmanager
async def running_baresip(home: Path, *args: str) -> AsyncIterator[Baresip]:
    """baresip with `home` and `args` (at most 60 s), stopped when the block ends."""
    process = await asyncio.create_subprocess_exec(
        "baresip", "-f", str(home), *args, "-t", "60", stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    baresip = Baresip(process)
    reader = asyncio.create_task(baresip.read())
    try:
        yield baresip
    finally:
        if process.returncode is None:
            process.terminate()
        await process.wait()
        await reader


def recording(home: Path, direction: str) -> tuple[bytes, int]:
    """What baresip heard ("dec") or sent ("enc"), as PCM16 and its rate."""
    (path,) = (home / "recordings").glob(f"*-{direction}.wav")
    with wave.open(str(path)) as wav:
        return wav.readframes(wav.getnframes()), wav.getframerate()


async def test_baresip_call_is_understood_answered_and_hung_up_by_us(
        make_server: ServerFactory, tmp_path: Path) -> None:
    server = await make_server()
    # Two turns: a request, then "okay goodbye" (the agent answers, then sends BYE before the file ends).
    speech = (bytes(16000) + speak("say hello world", 8000) + bytes(16000 * 4) + speak("okay goodbye", 8000)
              + bytes(16000 * 8))
    home = baresip_home(tmp_path, write_wav(tmp_path / "caller.wav", speech, 8000))
    async with running_baresip(home, "-e", f"/dial sip:agent@{server.target}") as baresip:
        (session,) = await server.wait_ended(timeout=60)
    output = baresip.output()
    assert "Call established" in output, output
    entries = [(e.role, e.text) for e in session.conversation.transcript.entries()]
    assert entries == [("user", "say hello world"), ("agent", "Hello world."),
                       ("user", "okay goodbye"), ("agent", "Goodbye. Thanks for calling.")], output
    assert session.end_reason == "agent ended the call"
    assert "terminated" in output, output  # baresip accepted our BYE

    heard, rate = recording(home, "dec")
    assert active_ms(heard, rate) > 1000  # the two replies, not silence
    assert "hello world" in transcribe(loud_part(heard, rate)[: rate * 2 * 3], rate, REPLY_PHRASES)
    for reply in ("Hello world.", "Goodbye.", "Thanks for calling."):
        reference = ulaw_decode(ulaw_encode(b"".join([chunk async for chunk in server.tts.synthesize(reply, rate)])))
        assert best_match(heard, loud_part(reference, rate, margin_ms=0)) > 0.9, reply
