"""baresip, a strict SIP stack, phones in with a WAV file and records what it hears."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import shutil
import wave
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.sip_calls.conftest import REPLY_PHRASES, ServerFactory, best_match, free_port, loud_part
from tests.speech import active_ms, speak, transcribe, write_wav
from voicegate.internal.audio.g711 import ulaw_decode, ulaw_encode

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


class BaresipConsole:
    """baresip's ctrl_tcp console (module ctrl_tcp.so): commands as netstring-framed JSON, answered on the
    same connection, which also carries baresip's events (a call established, a key received...)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self.events: list[dict[str, Any]] = []
        self._answers: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError, ValueError):
            while True:
                length = int((await self._reader.readuntil(b":"))[:-1])
                message = json.loads((await self._reader.readexactly(length + 1))[:-1])
                (self.events.append if message.get("event") else self._answers.put_nowait)(message)

    async def send(self, command: str, params: str = "") -> dict[str, Any]:
        body = json.dumps({"command": command, "params": params, "token": "test"}).encode()
        self._writer.write(str(len(body)).encode() + b":" + body + b",")
        await self._writer.drain()
        return await asyncio.wait_for(self._answers.get(), 10)

    def close(self) -> None:
        self._task.cancel()
        self._writer.close()


def with_console(home: Path) -> int:
    """Add the ctrl_tcp console to a baresip home; returns its port."""
    port = free_port()
    with (home / "config").open("a") as config:
        config.write(f"module ctrl_tcp.so\nctrl_tcp_listen 127.0.0.1:{port}\n")
    return port


@contextlib.asynccontextmanager
async def console(port: int) -> AsyncIterator[BaresipConsole]:
    """baresip's console once it listens (baresip starts it after loading its modules)."""
    for _ in range(200):
        with contextlib.suppress(OSError):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"baresip's console never listened on {port}")
    opened = BaresipConsole(reader, writer)
    try:
        yield opened
    finally:
        opened.close()


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
