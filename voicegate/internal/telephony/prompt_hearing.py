"""A menu prompt heard again, whole, by a recogniser chosen for menus ([menus] whisper_model).

The call's own recogniser hears a menu as the caller's speech is heard: in parts cut at the prompt's
pauses, by the model sized for a conversation's latency (Whisper tiny.en). A menu can wait: once a prompt
has ended, its whole audio is decoded once more in one window, with a larger model and a wider search.
espeak-ng's en-gb "Valley Water. If you have a burst pipe or no water, press 1." through G.711 came back
in parts from tiny.en as "Maddy Walker If you have a more time. No Walker."; whole, from Whisper base
with beam 5, as "Mali water, if you have a burst pipe for no water, press 1" (docs/sip.md, "Phone
menus"). The model loads in its own worker process on the first walk, not at start-up.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from voicegate.internal.config.providers import WhisperConfig
from voicegate.internal.stt.whisper import WhisperSpeechToText

log = logging.getLogger(__name__)


class PromptHearing:
    """Whole menu prompts through one Whisper worker; "" when it cannot hear (the walk keeps the parts)."""

    def __init__(self, model: str, beam_size: int, whisper: WhisperConfig, models_dir: Path) -> None:
        self._config = whisper.model_copy(update={"model": model, "beam_size": beam_size, "workers": 1,
                                                  "shed_after_ms": 0, "noisy_beam_size": 0})
        self._models_dir = models_dir
        self._ears: WhisperSpeechToText | None = None
        self._failed = False
        self._lock = asyncio.Lock()

    async def _engine(self) -> WhisperSpeechToText | None:
        async with self._lock:
            if self._ears is None and not self._failed:
                try:  # resolving may assemble and hash the model's files: off the event loop
                    self._ears = await asyncio.to_thread(WhisperSpeechToText, self._config, self._models_dir,
                                                         log.info)
                except Exception as exc:  # a missing model: say so once, and hear menus in parts
                    self._failed = True
                    log.warning("menu prompts are heard in parts only",
                                extra={"model": self._config.model, "reason": str(exc)})
        return self._ears

    async def warm_up(self) -> None:
        """Load the model (when a walk begins, so that the first prompt does not wait for it)."""
        ears = await self._engine()
        if ears is not None:
            try:
                await ears.warm_up()
            except Exception as exc:
                log.warning("menu prompt recogniser did not start", extra={"reason": str(exc)})

    async def hear(self, pcm: bytes, sample_rate: int) -> str:
        ears = await self._engine() if pcm else None
        if ears is None:
            return ""
        try:
            return (await ears.transcribe(pcm, sample_rate, caller=self)).strip()
        except Exception as exc:  # overloaded, a worker lost: the parts the call heard still stand
            log.warning("menu prompt not heard again", extra={"reason": str(exc)})
            return ""

    async def aclose(self) -> None:
        if self._ears is not None:
            await self._ears.aclose()
