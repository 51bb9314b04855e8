"""The provider's optional surface as the runtime offers it: described, health-checked, and its
learning hooks (observe, observe_audio, flush), session digests and owner listing called only when the
provider has them and declares the capability, with their failures contained.

FrontendMemoryRuntime inherits this, so the pipeline, the tools, the HTTP layer and the CLI reach these
through the runtime like everything else, never the provider object itself. What a provider lacks the
adapter (internal/memory/adapters.py) answers for; what it answers is checked here.
"""

from __future__ import annotations

import asyncio
import logging

from voicegate.internal.config.providers import MemoryConfig
from voicegate.internal.memory.adapters import AdaptedProvider
from voicegate.internal.memory.errors import CallerErased, MemoryUnavailable
from voicegate.internal.memory.provider import (
    AudioEvent,
    Exchange,
    Health,
    OwnerErased,
    ProviderCapabilities,
    ProviderDescription,
    SessionContext,
)
from voicegate.internal.memory.records import OwnerSummary, SessionDigest
from voicegate.internal.memory.tasks import TaskEntry

log = logging.getLogger(__name__)

OBSERVE_AUDIO_FAILURES_LOGGED = 1  # the audio hot path logs a failing provider once, then counts
HEALTH_TIMEOUT_S = 2.0
HEALTH_DETAIL_CHARS = 200


class ProviderSurface:
    provider: AdaptedProvider
    config: MemoryConfig
    capabilities: ProviderCapabilities
    audio_failures: int = 0  # observe_audio() calls that raised (logged once, see observe_audio)

    def describe(self) -> ProviderDescription:
        """The provider's description; a placeholder when it cannot give one."""
        return self.provider.describe()

    async def health(self) -> Health:
        """The provider's health, never raising: a failing or malformed answer is reported as not ok with
        the exception's type only (its message might quote stored content)."""
        try:
            async with asyncio.timeout(HEALTH_TIMEOUT_S):
                answer = await self.provider.health()
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
        return self.provider.notifies_changes

    @property
    def keeps_session_digests(self) -> bool:
        return self.provider.keeps_session_digests

    # ---- the task ledger (internal/memory/tasks.py) ----------------------------------------------

    @property
    def keeps_tasks(self) -> bool:
        return self.provider.keeps_tasks

    async def record_task(self, owner: str, entry: TaskEntry, epoch: int | None) -> bool:
        """Create or move one task's entry (bounded per owner, refused after an erasure of the owner
        since `epoch`); False when the provider keeps no ledger."""
        if not self.provider.keeps_tasks:
            return False
        day = 86400.0
        try:
            await self.provider.record_task(owner, entry, erasure_epoch=epoch,
                                            retention_s=self.config.retention_days * day,
                                            terminal_keep_s=self.config.task_terminal_days * day,
                                            max_per_owner=self.config.max_tasks)
        except OwnerErased:
            raise CallerErased("this caller's memory was erased after the call began; not saved") from None
        except Exception as exc:
            raise MemoryUnavailable(f"memory is unavailable ({type(exc).__name__})") from None
        return True

    async def tasks(self, owner: str, task_ids: list[str]) -> dict[str, TaskEntry]:
        """The live ledger entries of these tasks (absent: expired, never recorded, or no ledger)."""
        if not task_ids:
            return {}
        try:
            found = await self.provider.tasks(owner, task_ids)
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
        if not self.capabilities.session_observation or not self.provider.flushes:
            return False
        try:
            await self.provider.flush(owner, context)
        except OwnerErased:
            raise CallerErased("this caller's memory was erased after the call began") from None
        except Exception as exc:
            raise MemoryUnavailable(f"memory provider flush failed ({type(exc).__name__})") from None
        return True

    async def session_digests(self, owner: str, limit: int = 5) -> list[SessionDigest]:
        """The owner's latest session digests, newest first (none when the provider keeps none)."""
        try:
            found = await self.provider.session_digests(owner, limit)
        except Exception as exc:
            raise MemoryUnavailable(f"memory is unavailable ({type(exc).__name__})") from None
        return [digest for digest in found[:limit] if isinstance(digest, SessionDigest)]

    async def owners(self, limit: int = 100, offset: int = 0) -> list[OwnerSummary] | None:
        """A page of the stored owners (operators' CLI); None when the provider cannot list them."""
        return await self.provider.owners(limit, offset)
