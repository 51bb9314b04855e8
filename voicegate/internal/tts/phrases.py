"""Fixed phrases: text the agent says verbatim (greetings, the consent question, prompts, fillers),
rendered once per voice and output rate and then served from memory (and, optionally, from disk).

A render is keyed on everything that shapes its audio: the engine, its voice files' SHA-256 and its
settings (the provider's `voice_identity`), the output sample rate and the text. Change any of them and
the key changes, so a stale render is never served; nothing has to be flushed. Piper's voices add noise
to every render (`noise_scale`, `noise_w`), so two renders of one text differ slightly: the cache keeps
the first and says it again, the way a recorded prompt would be.

Only texts marked fixed are kept here, and only these may go to disk: a reply can hold callers' words.
Any other sentence can be said again from a second instance, the repeat cache (`[tts] repeat_cache_mb`,
`said_again`): memory only, never given a directory, so nothing of a call outlives the process.

On disk (internal/tts/phrase_files.py) each render carries a SHA-256 check and the files together stay
within the same byte bound as memory, least recently used out first.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path

from voicegate.internal.tts.phrase_files import PhraseFiles

OUTPUT_CHUNK = 3200  # bytes yielded at a time from a cached phrase (100 ms at 16 kHz, 200 ms at 8 kHz)


def phrase_text(text: str) -> str:
    """The form a phrase is marked and looked up in: whitespace as the engine reads it (one line)."""
    return " ".join(text.split())


class FixedPhrases:
    """Renders of fixed phrases, least recently used first out past `max_bytes`.

    `directory`, when given, keeps each render as `<key>.phrase` too, so a restarted node does not render
    its greeting again. The files are bounded by `max_bytes` as well (pruned to it at once: 0 keeps none),
    and one that fails its check is deleted and rendered again; a file that cannot be read or written is
    skipped, never an error for the call.
    """

    def __init__(self, max_bytes: int, directory: Path | None = None) -> None:
        self.max_bytes = max_bytes
        self.directory = directory
        self.files = PhraseFiles(directory, max_bytes) if directory is not None else None
        self._marked: set[str] = set()
        self._renders: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._rendering: dict[str, asyncio.Task[bytes]] = {}
        self._writes: set[asyncio.Future[None]] = set()  # renders being written to disk (in a thread)
        self.hits = 0
        self.misses = 0

    def mark(self, *texts: str) -> None:
        """Say these texts from the cache from now on (empty texts are ignored)."""
        self._marked.update(phrase for text in texts if (phrase := phrase_text(text)))

    def marked(self, text: str) -> bool:
        return self.max_bytes > 0 and phrase_text(text) in self._marked

    @property
    def texts(self) -> frozenset[str]:
        return frozenset(self._marked)

    @staticmethod
    def key(voice_identity: str, sample_rate: int, text: str) -> str:
        """The render's name. It ends with the rate, which its file on disk must be at (phrase_files)."""
        parts = (voice_identity, str(sample_rate), phrase_text(text))
        digest = hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()
        return f"{digest}-{sample_rate}"

    def get(self, key: str) -> bytes | None:
        """The phrase kept under `key`, from memory or disk (at start-up; calls use `said`)."""
        pcm = self._remembered(key)
        if pcm is not None:
            return pcm
        pcm = self.files.read(key) if self.files is not None else None
        if pcm is not None:
            self._keep(key, pcm)
            self.hits += 1
            return pcm
        self.misses += 1
        return None

    def _remembered(self, key: str) -> bytes | None:
        pcm = self._renders.get(key)
        if pcm is not None:
            self._renders.move_to_end(key)
            if self.files is not None:
                self.files.touch(key)  # in use here: not the file another node sharing the directory prunes
            self.hits += 1
        return pcm

    def put(self, key: str, pcm: bytes) -> None:
        if not pcm or len(pcm) > self.max_bytes:
            return
        self._keep(key, pcm)
        if self.files is not None:
            self.files.write(key, pcm)

    async def said(self, key: str, render: Callable[[], Awaitable[bytes]]) -> bytes:
        """The phrase kept under `key`, else what `render()` makes, then kept. Callers asking for one key at
        once (calls answered together, each opening with the greeting) share one render, and a caller that
        hangs up does not stop it for the others. The disk is read and written in a thread: a file's read,
        its SHA-256 check, a write and the directory's pruning never run on the calls' event loop."""
        task = self._rendering.get(key)
        if task is None:
            pcm = self._remembered(key)
            if pcm is None and self.files is not None:
                pcm = await asyncio.to_thread(self.files.read, key)
                if pcm is not None:
                    self._keep(key, pcm)
                    self.hits += 1
            if pcm is not None:
                return pcm
            task = self._rendering.get(key)  # another caller may have begun it while the disk was read
        if task is None:
            self.misses += 1
            task = asyncio.ensure_future(render())
            self._rendering[key] = task
            task.add_done_callback(lambda done: self._rendered(key, done))
        return await asyncio.shield(task)

    def cancel(self) -> None:
        """Stop the renders in flight (the provider is closing)."""
        for task in list(self._rendering.values()):
            task.cancel()

    def _rendered(self, key: str, task: asyncio.Task[bytes]) -> None:
        self._rendering.pop(key, None)
        if task.cancelled() or task.exception() is not None:  # retrieved: each waiting caller got it
            return
        pcm = task.result()
        if not pcm or len(pcm) > self.max_bytes:
            return
        self._keep(key, pcm)
        if self.files is not None:  # PhraseFiles.write logs and swallows its own failures
            self._writes.add(write := asyncio.ensure_future(asyncio.to_thread(self.files.write, key, pcm)))
            write.add_done_callback(self._writes.discard)

    def __len__(self) -> int:
        return len(self._renders)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def _keep(self, key: str, pcm: bytes) -> None:
        old = self._renders.pop(key, None)
        if old is not None:
            self._bytes -= len(old)
        self._renders[key] = pcm
        self._bytes += len(pcm)
        while self._bytes > self.max_bytes and self._renders:
            _, dropped = self._renders.popitem(last=False)
            self._bytes -= len(dropped)


def mark_fixed(tts: object, *texts: str) -> bool:
    """Have `tts` say these texts from its phrase cache from now on; False when the provider keeps none
    (espeak-ng, OpenAI: they render every time, which is what they did anyway)."""
    phrases = getattr(tts, "phrases", None)
    if not isinstance(phrases, FixedPhrases):
        return False
    phrases.mark(*texts)
    return True


async def said_again(repeats: FixedPhrases, key: str, render: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A sentence said before, from `repeats` (the repeat cache: memory only); else `render` streamed to
    this caller alone and kept once said whole. Unlike a fixed phrase's, the render is not shared: a caller
    who barges in stops it as before (nothing finished for nobody on a loaded node), and half a sentence
    is never kept."""
    pcm = repeats.get(key)
    if pcm is not None:
        for chunk in chunks(pcm):
            yield chunk
        return
    said: list[bytes] = []
    async for chunk in render:
        said.append(chunk)
        yield chunk
    repeats.put(key, b"".join(said))


def chunks(pcm: bytes, size: int = OUTPUT_CHUNK) -> Iterable[bytes]:
    for start in range(0, len(pcm), size):
        yield pcm[start : start + size]
