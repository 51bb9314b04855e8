"""LocalCall: drive a pipeline from audio buffers on a 20 ms clock, as a transport would.

`voicegate talk` uses it to run a conversation from WAV files, and tests use it as a caller: each tick
pushes one frame of caller audio (or silence) and pulls one frame of agent audio, which is recorded.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

from voicegate.internal.audio.frame import frame_bytes
from voicegate.internal.pipeline.pipeline import VoicePipeline


class LocalCall:
    def __init__(self, pipeline: VoicePipeline, speed: float = 1.0) -> None:
        self.pipeline = pipeline
        self.rate = pipeline.sample_rate
        self.frame = frame_bytes(self.rate)
        self.interval = 0.020 / speed
        self.agent_audio = bytearray()  # every frame the agent sent (silence when quiet)
        self.agent_frames = 0  # frames that carried agent audio
        self.ticks = 0
        self._caller: deque[bytes] = deque()
        self._task: asyncio.Task[None] | None = None
        self._tick_waiters: list[tuple[int, asyncio.Future[None]]] = []

    async def __aenter__(self) -> LocalCall:
        await self.pipeline.start()
        self._task = asyncio.create_task(self._run(), name="local-call-clock")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.pipeline.close()

    def say(self, pcm: bytes) -> None:
        """Queue caller audio (PCM16 mono at the pipeline's rate); it plays from the next tick."""
        padded = pcm + bytes(-len(pcm) % self.frame)
        for start in range(0, len(padded), self.frame):
            self._caller.append(padded[start : start + self.frame])

    @property
    def caller_busy(self) -> bool:
        return bool(self._caller)

    @property
    def queued_ms(self) -> int:
        """Caller audio still to play."""
        return len(self._caller) * 20

    async def ticks_later(self, count: int) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tick_waiters.append((self.ticks + count, future))
        await future

    async def wait_caller_done(self) -> None:
        while self._caller:
            await self.ticks_later(1)

    async def wait_agent_quiet(self, quiet_ms: int = 1000, timeout_s: float = 60.0) -> None:
        """Until the agent has said nothing (and is not thinking) for `quiet_ms`."""
        deadline = time.monotonic() + timeout_s
        quiet_ticks = 0
        while quiet_ticks * 20 < quiet_ms:
            if time.monotonic() > deadline:
                raise TimeoutError("the agent did not go quiet")
            before = self.agent_frames
            await self.ticks_later(1)
            busy = self.agent_frames != before or not self.pipeline.idle or self._caller
            quiet_ticks = 0 if busy else quiet_ticks + 1

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        silence = bytes(self.frame)
        while True:
            self.pipeline.push_audio(self._caller.popleft() if self._caller else silence)
            out = self.pipeline.pull_audio()
            if out is not None:
                self.agent_frames += 1
            self.agent_audio += out if out is not None else silence
            self.ticks += 1
            for waiter in [w for w in self._tick_waiters if w[0] <= self.ticks]:
                self._tick_waiters.remove(waiter)
                if not waiter[1].done():
                    waiter[1].set_result(None)
            next_at += self.interval
            await asyncio.sleep(max(0.0, next_at - loop.time()))
