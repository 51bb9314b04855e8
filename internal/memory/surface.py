"""The provider's optional surface as the runtime offers it: described, health-checked, and its
learning hooks (observe, observe_audio, flush), session digests and owner listing called only when the
provider has them and declares the capability, with their failures contained.

FrontendMemoryRuntime inherits this, so the pipeline, the tools, the HTTP layer and the CLI reach these
through the runtime like everything else, never the provider object itself.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any

from voicegate.internal.config.providers import MemoryConfig
from voicegate.internal.memory.errors import CallerErased, MemoryUnavailable
from voicegate.internal.memory.provider import (
    AudioEvent,
    Exchange,
    Health,
    OwnerErased,
    ProviderCapabilities,
    ProviderDescription,
    SessionContext,
    normalised_description,
)
from voicegate.internal.memory.records import OwnerSummary, SessionDigest
from voicegate.internal.memory.tasks import TaskEntry

log = logging.getLogger(__name__)

OBSERVE_AUDIO_FAILURES_LOGGED = 1  # the audio hot path logs a failing provider once, then counts
HEALTH_TIMEOUT_S = 2.0
HEALTH_DETAIL_CHARS = 200


class ProviderSurface:
    provider: Any
    config: MemoryConfig
    capabilities: ProviderCapabilities
    audio_failures: int = 0  # observe_audio() calls that raised (logged once, see observe_audio)

    def describe(self) -> ProviderDescription:
        """The provider's description; a placeholder when it cannot give one."""
        try:
            description = self.provider.describe()
        except Exception:
            return ProviderDescription("unknown", "a provider that cannot describe itself", 1)
        return normalised_description(description)

    async def health(self) -> Health:
        """The provider's health, never raising: a failing or malformed answer is reported as not ok with
        the exception's type only (its message might quote stored content)."""
        check = getattr(self.provider, "health", None)
        if check is None:
            return Health(True)
        try:
            answer = check()
            if inspect.isawaitable(answer):
                async with asyncio.timeout(HEALTH_TIMEOUT_S):
                    answer = await answer
        except Exception as exc:
            return Health(False, type(exc).__name__)
        if not isinstance(answer, Health) or not isinstance(answer.ok, bool):
            return Health(False, f"health() returned {type(answer).__name__}, not Health")
        detail = answer.detail if isinstance(answer.detail, str) else ""
        return Health(answer.ok, detail[:HEALTH_DETAIL_CHARS])

    @property
    def notifies_changes(self) -> bool:
        """Whether the provider tells other processes of its changes itself (the PostgreSQL provider, in
        its write transaction); else a change bus announces them for it (internal/memory/notify.py)."""
        return getattr(self.provider, "notifies_changes", False) is True

    @property
    def keeps_session_digests(self) -> bool:
        return callable(getattr(self.provider, "add_session_digest", None))

    # ---- the task ledger (internal/memory/tasks.py) ----------------------------------------------

    @property
    def keeps_tasks(self) -> bool:
        return callable(getattr(self.provider, "record_task", None))

    async def record_task(self, owner: str, entry: TaskEntry, epoch: int | None) -> bool:
        """Create or move one task's entry (bounded per owner, refused after an erasure of the owner
        since `epoch`); False when the provider keeps no ledger."""
        record = getattr(self.provider, "record_task", None)
        if record is None:
            return False
        day = 86400.0
        try:
            await record(owner, entry, erasure_epoch=epoch, retention_s=self.config.retention_days * day,
                         terminal_keep_s=self.config.task_terminal_days * day, max_per_owner=self.config.max_tasks)
        except OwnerErased:
            raise CallerErased("this caller's memory was erased after the call began; not saved") from None
        except Exception as exc:
            raise MemoryUnavailable(f"memory is unavailable ({type(exc).__name__})") from None
        return True

    async def tasks(self, owner: str, task_ids: list[str]) -> dict[str, TaskEntry]:
        """The live ledger entries of these tasks (absent: expired, never recorded, or no ledger)."""
        read = getattr(self.provider, "tasks", None)
        if read is None or not task_ids:
            return {}
        try:
            found = list(await read(owner, task_ids))
        except Exception as exc:
            raise MemoryUnavailable(f"memory is unavailable ({type(exc).__name__})") from None
        return {entry.task_id: entry for entry in found if isinstance(entry, TaskEntry)}

    # ---- learning providers ----------------------------------------------------------------------

    async def observe(self, owner: str, exchanges: list[Exchange], context: SessionContext) -> bool:
        """Hand completed exchanges to a provider that learns from conversations; False when it does not
        (or failed: learning is best effort and never fails a call)."""
        if not self.capabilities.session_observation or not exchanges:
            return False
        try:
            await self.provider.observe(owner, exchanges, context)
        except Exception as exc:
            log.warning("memory provider observe failed: %s", type(exc).__name__)
            return False
        return True

    def observe_audio(self, owner: str, event: AudioEvent, context: SessionContext) -> None:
        """The audio hot path: synchronous, and it survives a provider bug (logged once, then counted)."""
        if not self.capabilities.audio_stream_observation:
            return
        try:
            self.provider.observe_audio(owner, event, context)
        except Exception:
            self.audio_failures += 1
            if self.audio_failures <= OBSERVE_AUDIO_FAILURES_LOGGED:
                log.exception("memory provider observe_audio failed (later failures are counted, not logged)")

    async def flush(self, owner: str, context: SessionContext) -> bool:
        """Tell a learning provider a session ended; False when it learns nothing. Raises
        MemoryUnavailable (the hang-up outbox retries) or CallerErased (it drops the write)."""
        flush = getattr(self.provider, "flush", None)
        if not self.capabilities.session_observation or flush is None:
            return False
        try:
            await flush(owner, context)
        except OwnerErased:
            raise CallerErased("this caller's memory was erased after the call began") from None
        except Exception as exc:
            raise MemoryUnavailable(f"memory provider flush failed ({type(exc).__name__})") from None
        return True

    async def session_digests(self, owner: str, limit: int = 5) -> list[SessionDigest]:
        """The owner's latest session digests, newest first (none when the provider keeps none)."""
        read = getattr(self.provider, "session_digests", None)
        if read is None:
            return []
        try:
            found = list(await read(owner, limit))
        except Exception as exc:
            raise MemoryUnavailable(f"memory is unavailable ({type(exc).__name__})") from None
        return [digest for digest in found[:limit] if isinstance(digest, SessionDigest)]

    async def owners(self, limit: int = 100, offset: int = 0) -> list[OwnerSummary] | None:
        """A page of the stored owners (operators' CLI); None when the provider cannot list them."""
        listing = getattr(self.provider, "owners", None)
        if listing is None:
            return None
        return list(await listing(limit, offset))
