"""Local text-to-speech with espeak-ng, one short-lived process per sentence.

Synthesis runs in the espeak-ng process, never on the event loop; its WAV output is read as it is
produced and resampled to the call's rate chunk by chunk, so the first audio of a sentence is ready
in a few milliseconds. A semaphore bounds how many syntheses run at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import AsyncGenerator, AsyncIterator

from voicegate.internal.audio.resample import Resampler
from voicegate.internal.config.providers import EspeakConfig
from voicegate.internal.telemetry.queues import WorkQueue
from voicegate.internal.tts.base import TtsError

log = logging.getLogger(__name__)

READ_CHUNK = 4096
WAV_HEADER = 44  # espeak-ng writes a plain 44-byte RIFF header (with a bogus length on --stdout)


def parse_wav_header(header: bytes) -> int:
    """The sample rate of espeak-ng's mono PCM16 output."""
    if len(header) < WAV_HEADER or header[:4] != b"RIFF" or header[8:12] != b"WAVE":
        raise TtsError("espeak-ng did not produce a WAV stream")
    channels, rate = struct.unpack("<HI", header[22:28])
    bits = struct.unpack("<H", header[34:36])[0]
    if channels != 1 or bits != 16:
        raise TtsError(f"unexpected espeak-ng output format ({channels} channels, {bits} bits)")
    return int(rate)


class EspeakTextToSpeech:
    name = "espeak"

    def __init__(self, config: EspeakConfig) -> None:
        self._config = config
        self._slots = asyncio.Semaphore(config.workers)
        self.queue = WorkQueue("espeak")

    def queues(self) -> list[WorkQueue]:
        return [self.queue]

    async def synthesize(self, text: str, sample_rate: int) -> AsyncIterator[bytes]:
        text = text.strip()
        if not text:
            return
        token = self.queue.enter()
        try:
            await self._slots.acquire()
        except BaseException:  # the caller gave up waiting
            self.queue.drop(token)
            raise
        self.queue.leave(token)
        self.queue.running += 1
        try:
            async with contextlib.aclosing(self._speak(text, sample_rate)) as chunks:  # kills espeak-ng if abandoned
                async for chunk in chunks:
                    yield chunk
        finally:
            self.queue.running -= 1
            self._slots.release()

    async def _speak(self, text: str, sample_rate: int) -> AsyncGenerator[bytes, None]:
        try:
            process = await asyncio.create_subprocess_exec(
                self._config.binary, "-v", self._config.voice, "-s", str(self._config.rate_wpm),
                "-p", str(self._config.pitch), "--stdout", "--", text,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )
        except OSError as exc:
            raise TtsError(f"cannot run {self._config.binary}: {exc.strerror}") from exc
        assert process.stdout is not None
        try:
            header = await process.stdout.readexactly(WAV_HEADER)
            resampler = Resampler(parse_wav_header(header), sample_rate)
            carry = b""
            while chunk := await process.stdout.read(READ_CHUNK):
                data = carry + chunk
                usable = len(data) - len(data) % 2
                carry = data[usable:]
                out = resampler.process(data[:usable])
                if out:
                    yield out
            tail = resampler.flush()
            if tail:
                yield tail
            await process.wait()
        except asyncio.IncompleteReadError as exc:
            raise TtsError("espeak-ng produced no audio") from exc
        finally:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()

    async def aclose(self) -> None:
        return None
