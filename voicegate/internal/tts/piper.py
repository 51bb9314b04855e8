"""Local text-to-speech with Piper, run as long-lived child processes and never imported.

Piper is GPL-3.0-or-later and voicegate is Apache-2.0, so voicegate only talks to Piper's own program
over pipes; no Piper code is loaded into this process. Loading a voice takes over a second, so each
worker process stays up and speaks many sentences: one line of text on its stdin, one WAV file in its
private output directory, announced by a `Wrote <path>` line on its stderr. (`--output-raw` streams
audio but marks no boundary between sentences, so one process could not serve several.) A sentence's
audio exists only once Piper has made all of it: a few hundred milliseconds on a warm worker.

A worker that dies is replaced and its sentence retried once; one that hangs past the timeout is
killed. A caller that gives up mid-sentence leaves the worker busy, and the next sentence on it first
discards the abandoned WAV. Workers run in their own session (a Ctrl-C aimed at the server does not
kill them mid-call) and exit at end of input, which is what they see when the server dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import shutil
import tempfile
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from voicegate.internal.audio.resample import Resampler, resample
from voicegate.internal.config.providers import PiperConfig
from voicegate.internal.devices import onnx_available_providers
from voicegate.internal.telemetry.queues import WorkQueue
from voicegate.internal.tts.base import SLACK_S, TtsError
from voicegate.internal.tts.phrases import FixedPhrases, chunks, said_again
from voicegate.internal.tts.piper_launch import THREADS_ENV
from voicegate.internal.tts.piper_pool import Slot, WorkerPool
from voicegate.internal.tts.piper_voice import (
    PINNED_VOICE_SHA256,
    file_sha256,
    pinned_digests,
    piper_available,
    piper_command,
    piper_uses_cuda,
    resolve_voice,
    verify_voice,
    voice_config_path,
)
from voicegate.internal.tts.wav import wav_to_pcm

__all__ = ["PINNED_VOICE_SHA256", "PiperProcess", "PiperTextToSpeech", "piper_available", "resolve_voice",
           "verify_voice"]

log = logging.getLogger(__name__)

OUTPUT_CHUNK = 8192  # bytes of Piper's PCM resampled and yielded at a time (~190 ms at 22050 Hz)
WARM_UP_TEXT = "Ready."
STOP_GRACE_S = 2.0  # time to finish the sentence in hand and exit at end of input before a kill
EXIT_GRACE_S = 1.0  # a worker whose stderr closed gets this long to report its exit status
STDERR_TAIL = 4  # lines of a worker's own complaints kept to explain its death
_WROTE = ":Wrote "


class _WorkerExited(Exception):
    """The Piper process went away before announcing the sentence's WAV."""


class PiperProcess:
    """One `piper -d DIR` child: a line of text on stdin in, the path of its WAV out."""

    def __init__(self, process: asyncio.subprocess.Process, argv: list[str], out_dir: Path) -> None:
        self._process = process
        self.argv = argv
        self.out_dir = out_dir
        self.served = 0
        # Lines written whose WAV nobody has taken yet: more than the current one means a caller gave up.
        self._pending = 0
        self._wrote: asyncio.Queue[Path | None] = asyncio.Queue()
        self._tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self._reader = asyncio.create_task(self._read_stderr())

    @classmethod
    async def start(cls, argv: list[str], env: Mapping[str, str] | None = None) -> PiperProcess:
        out_dir = Path(tempfile.mkdtemp(prefix="voicegate-piper-"))  # mode 0700
        full = [*argv, "-d", str(out_dir)]
        try:
            # cwd: `-m piper` must not pick up a stray piper module from the server's working directory.
            # PYTHONIOENCODING: Piper reads stdin in the locale's encoding, and we write UTF-8.
            process = await asyncio.create_subprocess_exec(
                *full, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE, cwd=out_dir, start_new_session=True,
                env={**os.environ, **(env or {}), "PYTHONIOENCODING": "utf-8"},
            )
        except OSError as exc:
            shutil.rmtree(out_dir, ignore_errors=True)
            raise TtsError(f"cannot run Piper ({shlex.join(argv)}): {exc.strerror or exc}") from exc
        except BaseException:
            shutil.rmtree(out_dir, ignore_errors=True)
            raise
        return cls(process, argv, out_dir)

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def alive(self) -> bool:
        return self._process.returncode is None and not self._reader.done()

    async def speak(self, line: str, timeout_s: float) -> Path:
        """The WAV Piper wrote for `line`. Raises TimeoutError when any one WAV takes over `timeout_s`."""
        stdin = self._process.stdin
        assert stdin is not None
        try:
            stdin.write(line.encode("utf-8", "replace") + b"\n")
            self._pending += 1
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise _WorkerExited from exc
        while True:
            async with asyncio.timeout(timeout_s):
                path = await self._wrote.get()
            if path is None:
                self._wrote.put_nowait(None)  # stays gone for any later caller too
                raise _WorkerExited
            self._pending -= 1
            if self._pending == 0:
                self.served += 1
                return path
            with contextlib.suppress(OSError):
                path.unlink()  # the sentence of a caller that gave up

    def failure(self) -> str:
        """How the process ended, with its last complaint."""
        code = self._process.returncode
        if code is None:
            status = "closed its output"
        elif code < 0:
            status = f"was killed by signal {-code}"
        else:
            status = f"exited with status {code}"
        said = f": {self._tail[-1]}" if self._tail else ""
        return f"{status}{said}"

    def failure_report(self) -> str:
        return f"Piper {self.failure()} (ran {shlex.join(self.argv)})"

    async def stop(self, grace_s: float) -> None:
        """End of input lets Piper finish its sentence and exit; after `grace_s` it is killed."""
        stdin = self._process.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()
        try:
            async with asyncio.timeout(grace_s):
                await self._process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
            await self._process.wait()
        # Its last words explain its death; stderr ends with the process unless something inherited it.
        await asyncio.wait([self._reader], timeout=EXIT_GRACE_S)
        self._reader.cancel()
        shutil.rmtree(self.out_dir, ignore_errors=True)

    async def _read_stderr(self) -> None:
        stderr = self._process.stderr
        assert stderr is not None
        try:
            while True:
                try:
                    raw = await stderr.readline()
                except ValueError:  # a line past the stream limit: not one of ours
                    continue
                if not raw:
                    return
                line = raw.decode("utf-8", "replace").rstrip()
                _, wrote, rest = line.partition(_WROTE)
                if wrote and Path(rest).parent == self.out_dir:
                    self._wrote.put_nowait(Path(rest))
                elif line:
                    self._tail.append(line[:200])
        finally:
            self._wrote.put_nowait(None)


class PiperTextToSpeech:
    name = "piper"

    def __init__(self, config: PiperConfig, voice_sha256: Mapping[str, frozenset[str]] | None = None,
                 phrases: FixedPhrases | None = None, repeats: FixedPhrases | None = None,
                 cores: int | None = None) -> None:
        """`voice_sha256` pins the voice's files by name; None pins the packaged voice only. `phrases`: the
        fixed phrases said from a cache (none without it). `repeats`: any other sentence said before, said
        again from memory (none without it). `cores`: the cores to size the workers for (None: this
        process's usable cores)."""
        self._config = config
        self.phrases = phrases if phrases is not None else FixedPhrases(0)
        self.repeats = repeats if repeats is not None else FixedPhrases(0)
        self._identity: str | None = None
        self._expected = voice_sha256 if voice_sha256 is not None else pinned_digests(config)
        self.cuda = piper_uses_cuda(config, onnx_available_providers())
        self._voice: Path | TtsError | None = None
        self._voice_lock = asyncio.Lock()
        self.pool: WorkerPool[PiperProcess] = WorkerPool.sized(config.workers, config.threads, self.cuda, cores)
        self._slots = self.pool.slots
        self.queue = WorkQueue("piper")
        self._closed = False

    def queues(self) -> list[WorkQueue]:
        return [self.queue]

    @property
    def worker_pids(self) -> list[int]:
        return [slot.process.pid for slot in self._slots if slot.process is not None and slot.process.alive]

    async def warm_up(self) -> None:
        """Start every worker and wait until each has loaded its voice, so no caller waits for one."""
        model = await self._checked_voice()

        async def warm(slot: Slot[PiperProcess]) -> None:
            await asyncio.to_thread(_take_wav, await self._speak_on(slot, WARM_UP_TEXT, model))

        try:  # each slot once, the wide one too, whatever the pool would choose now
            async with asyncio.TaskGroup() as group:
                for slot in self._slots:
                    group.create_task(warm(slot))
        except ExceptionGroup as failed:
            # The others were cancelled mid-sentence: stopped too, not left busy with a sentence nobody takes.
            await asyncio.gather(*(self._retire(slot, 0) for slot in self._slots))
            raise failed.exceptions[0] from None

    async def voice_identity(self) -> str:
        """Everything that shapes a render but the text and the output rate: the phrase cache's key."""
        if self._identity is None:
            model = await self._checked_voice()
            digests = await asyncio.to_thread(lambda: [file_sha256(model), file_sha256(voice_config_path(model))])
            self._identity = "\x00".join([
                "piper", *digests, f"length_scale={self._config.length_scale!r}", f"speaker={self._config.speaker}",
                shlex.join(self._config.command),
            ])
        return self._identity

    async def synthesize(self, text: str, sample_rate: int) -> AsyncIterator[bytes]:
        line = " ".join(text.split())  # Piper reads one sentence per line
        if not any(char.isalnum() for char in line):
            return  # nothing to say, and Piper crashes on a line without phonemes ("…")
        if self.phrases.marked(line):
            key = self.phrases.key(await self.voice_identity(), sample_rate, line)

            async def render() -> bytes:
                return b"".join([chunk async for chunk in self._synthesize(line, sample_rate)])

            for chunk in chunks(await self.phrases.said(key, render)):
                yield chunk
            return
        if self.repeats.max_bytes == 0:
            async for chunk in self._synthesize(line, sample_rate):
                yield chunk
            return
        key = self.repeats.key(await self.voice_identity(), sample_rate, line)
        async for chunk in said_again(self.repeats, key, self._synthesize(line, sample_rate)):
            yield chunk

    async def prepare(self, sample_rates: list[int]) -> None:
        """Render every marked phrase not cached yet, once, at each of `sample_rates`, so no caller waits
        for one (a start-up or idle-time job: it occupies a worker per phrase)."""
        identity = await self.voice_identity()
        for text in sorted(self.phrases.texts):
            keys = {rate: self.phrases.key(identity, rate, text) for rate in sample_rates}
            missing = {rate: key for rate, key in keys.items() if self.phrases.get(key) is None}
            if not missing or not any(char.isalnum() for char in text):
                continue
            pcm, rate = await self._render(text)
            for out_rate, key in missing.items():
                self.phrases.put(key, resample(pcm, rate, out_rate))

    async def _synthesize(self, line: str, sample_rate: int) -> AsyncIterator[bytes]:
        started = time.monotonic()
        pcm, rate = await self._render(line)
        log.debug("piper: %d characters, %.2f s of audio in %.0f ms",
                  len(line), len(pcm) / 2 / rate, 1000 * (time.monotonic() - started))
        resampler = Resampler(rate, sample_rate)
        for start in range(0, len(pcm), OUTPUT_CHUNK):
            out = resampler.process(pcm[start : start + OUTPUT_CHUNK])
            if out:
                yield out
        tail = resampler.flush()
        if tail:
            yield tail

    async def aclose(self) -> None:
        self._closed = True
        self.phrases.cancel()
        await asyncio.gather(*(self._retire(slot, STOP_GRACE_S) for slot in self._slots))

    async def _render(self, line: str) -> tuple[bytes, int]:
        model = await self._checked_voice()
        token = self.queue.enter()
        try:
            slot = await self.pool.take(SLACK_S.get())
        except BaseException:  # the caller gave up waiting
            self.queue.drop(token)
            raise
        self.queue.leave(token)
        self.queue.running += 1
        started = time.monotonic()
        try:
            path = await self._speak_on(slot, line, model)
            self.queue.served(started)
        finally:
            self.queue.running -= 1
            self.pool.give_back(slot)  # the WAV is ours now: the worker can take the next sentence
        return await asyncio.to_thread(_take_wav, path)

    async def _speak_on(self, slot: Slot[PiperProcess], line: str, model: Path) -> Path:
        retried = False
        while True:
            process = await self._running(slot, model)
            try:
                return await process.speak(line, self._config.timeout_s)
            except TimeoutError:
                await self._retire(slot, 0)
                raise TtsError(
                    f"Piper took over {self._config.timeout_s:g} s for a {len(line)}-character sentence; "
                    f"worker {slot.index} was killed"
                ) from None
            except _WorkerExited:
                await self._retire(slot, EXIT_GRACE_S)
                # A worker that never spoke is a start failure (bad voice or command): retrying cannot help.
                if retried or process.served == 0:
                    raise TtsError(process.failure_report()) from None
                log.warning("piper worker %d (pid %d) %s; retrying the sentence in a new one",
                            slot.index, process.pid, process.failure())
                retried = True

    async def _running(self, slot: Slot[PiperProcess], model: Path) -> PiperProcess:
        if self._closed:
            raise TtsError("the Piper provider is closed")
        if slot.process is not None and not slot.process.alive:
            log.warning("piper worker %d (pid %d) %s; replacing it", slot.index, slot.process.pid,
                        slot.process.failure())
            await self._retire(slot, EXIT_GRACE_S)
        if slot.process is None:
            threads = {THREADS_ENV: str(slot.threads)} if slot.threads else {}
            slot.process = await PiperProcess.start(self._argv(model), threads)
            if self._closed:  # aclose ran while it started and could not see it
                await self._retire(slot, 0)
                raise TtsError("the Piper provider is closed")
            log.info("piper worker %d started (pid %d, %s threads)", slot.index, slot.process.pid,
                     slot.threads or "onnxruntime's default")
        return slot.process

    async def _retire(self, slot: Slot[PiperProcess], grace_s: float) -> None:
        process, slot.process = slot.process, None
        if process is not None:
            await asyncio.shield(process.stop(grace_s))  # a cancelled caller must not leak the process

    async def _checked_voice(self) -> Path:
        """The voice, resolved and checked once; a voice found wanting stays refused."""
        async with self._voice_lock:
            if self._voice is None:
                try:
                    model = resolve_voice(self._config)
                    if self._expected is not None:
                        await asyncio.to_thread(verify_voice, model, self._expected)
                    self._voice = model
                except TtsError as exc:
                    self._voice = exc
            voice = self._voice
        if isinstance(voice, TtsError):
            raise TtsError(str(voice))
        return voice

    def _argv(self, model: Path) -> list[str]:
        return [
            *piper_command(self._config), "-m", str(model), "-c", str(voice_config_path(model)),
            "--length-scale", str(self._config.length_scale), "-s", str(self._config.speaker),
            *(["--cuda"] if self.cuda else []),
        ]


def _take_wav(path: Path) -> tuple[bytes, int]:
    """Read one of Piper's WAV files and delete it."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TtsError(f"cannot read Piper's output {path}: {exc.strerror}") from exc
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
    try:
        return wav_to_pcm(data)
    except ValueError as exc:
        raise TtsError(f"Piper wrote an unusable WAV: {exc}") from exc
