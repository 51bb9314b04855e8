"""A node of its own for the phrase-cache tests: real Piper, a phrase cache on a directory that other
processes share. Run as `python -m tests.providers.phrase_cache_node DIRECTORY VOICE MAX_BYTES OUT TEXT...`:
it says each TEXT at 8 kHz through the cache and writes, to OUT, how many renders Piper made, then each
phrase's audio as hex, one a line."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from voicegate.internal.config.providers import PiperConfig
from voicegate.internal.tts.phrases import FixedPhrases
from voicegate.internal.tts.piper import PiperTextToSpeech


async def main(directory: Path, voice: str, max_bytes: int, out: Path, texts: list[str]) -> None:
    phrases = FixedPhrases(max_bytes, directory)
    phrases.mark(*texts)
    tts = PiperTextToSpeech(PiperConfig(voice=voice, workers=1), phrases=phrases)
    try:
        said = [b"".join([chunk async for chunk in tts.synthesize(text, 8000)]) for text in texts]
    finally:
        await tts.aclose()
    out.write_text("\n".join([str(tts.queue.taken), *(pcm.hex() for pcm in said)]))


if __name__ == "__main__":
    directory, voice, max_bytes, out, *texts = sys.argv[1:]
    asyncio.run(main(Path(directory), voice, int(max_bytes), Path(out), texts))
