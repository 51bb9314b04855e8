"""One typed provider for the runtime, whatever the deployer wrote: `adapt(provider)`.

A provider implements `MemoryProvider` (describe, list, apply: all version 1 had) and any of the
optional methods internal/memory/provider.py lists. `adapt()` wraps it once, at the composition root
(server/gateway.py, server/memory_cli.py; a test or a benchmark that builds a runtime does the same), in
an `AdaptedProvider` that has every method, typed, and answers for the ones the provider lacks the way
a provider that keeps nothing would: no epochs (the runtime keeps them, in this process), no cache to
warm or drop, no session digests, no task ledger, nothing to export, purge, close or fingerprint. So
FrontendMemoryRuntime never asks a provider what it has (no getattr, no hasattr); it asks the adapter
(`keeps_epochs`, `keeps_session_digests`, `keeps_tasks`, `flushes`, `records_key_fingerprint`), and calls.
`MemoryProvider` stays what a deployer implements (the public contract, voicegate.memory); the runtime
holds the `AdaptedProvider`, the whole surface in one typed class.

The adapter looks a method up when it is called, not when it is built, so a provider that gains or
swaps one later (a test's fault injection, a provider that opens lazily) is seen as it is; it checks
nothing a provider answers (internal/memory/results.py and the runtime do) beyond giving an answer its
declared type where the runtime used to.
"""

from __future__ import annotations

import builtins
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from voicegate.internal.memory.errors import MemoryRuntimeError
from voicegate.internal.memory.provider import (
    ApplyResult,
    AudioEvent,
    ChangeContext,
    Exchange,
    Health,
    ListOptions,
    MemoryChange,
    MemoryDocument,
    MemoryProvider,
    ProviderCapabilities,
    ProviderDescription,
    QueryOptions,
    QueryResult,
    SessionContext,
    normalised_description,
)
from voicegate.internal.memory.records import OwnerSummary, SessionDigest
from voicegate.internal.memory.tasks import TaskEntry

NO_DESCRIPTION = ProviderDescription("unknown", "a provider that cannot describe itself", 1)


def adapt(provider: MemoryProvider | AdaptedProvider) -> AdaptedProvider:
    """`provider` with every method the runtime calls (an adapted one is returned as it is)."""
    return provider if isinstance(provider, AdaptedProvider) else AdaptedProvider(provider)


class AdaptedProvider:
    """A provider of any protocol version, with the optional methods filled in (see the module's text)."""

    def __init__(self, inner: MemoryProvider) -> None:
        self.inner = inner

    def _optional(self, name: str) -> Callable[..., Any] | None:
        method = getattr(self.inner, name, None)
        return method if callable(method) else None

    # ---- what every provider has -----------------------------------------------------------------

    def describe(self) -> ProviderDescription:
        """The description, normalised (a v1 one has no capabilities); a placeholder when it cannot give one."""
        try:
            return normalised_description(self.inner.describe())
        except Exception:
            return NO_DESCRIPTION

    @property
    def capabilities(self) -> ProviderCapabilities:
        return self.describe().capabilities

    def list(self, owner_id: str, options: ListOptions) -> Sequence[MemoryDocument]:
        return self.inner.list(owner_id, options)

    async def apply(self, owner_id: str, changes: Sequence[MemoryChange], context: ChangeContext) -> ApplyResult:
        return await self.inner.apply(owner_id, changes, context)

    # ---- capabilities (called only when declared; a provider claiming one it lacks fails the call) --

    async def query(self, owner_id: str, query: str, options: QueryOptions, context: Any) -> QueryResult:
        answer: QueryResult = await self._required("query")(owner_id, query, options, context)
        return answer

    async def observe(self, owner_id: str, exchanges: builtins.list[Exchange], context: SessionContext) -> None:
        await self._required("observe")(owner_id, exchanges, context)

    def observe_audio(self, owner_id: str, event: AudioEvent, context: SessionContext) -> None:
        self._required("observe_audio")(owner_id, event, context)

    def _required(self, name: str) -> Callable[..., Any]:
        """A method the caller knows it has (from a `keeps_*` or its capabilities): AttributeError if not."""
        method: Callable[..., Any] = getattr(self.inner, name)
        return method

    @property
    def flushes(self) -> bool:
        return self._optional("flush") is not None

    async def flush(self, owner_id: str, context: SessionContext) -> None:
        flush = self._optional("flush")
        if flush is not None:
            await flush(owner_id, context)

    # ---- the snapshot's cache --------------------------------------------------------------------

    async def prefetch(self, owner_id: str) -> None:
        """Warm the cache `list()` reads (nothing to do for a provider that keeps none)."""
        prefetch = self._optional("prefetch")
        if prefetch is not None:
            await prefetch(owner_id)

    def cached(self, owner_id: str) -> bool:
        """Whether `list()` holds the owner as read; a provider that cannot say is taken at its word."""
        cached = self._optional("cached")
        return True if cached is None else bool(cached(owner_id))

    def invalidate(self, owner_id: str) -> None:
        invalidate = self._optional("invalidate")
        if invalidate is not None:
            invalidate(owner_id)

    def invalidate_all(self) -> None:
        clear = self._optional("invalidate_all")
        if clear is not None:
            clear()

    @property
    def notifies_changes(self) -> bool:
        """Whether it tells other processes of its changes itself (internal/memory/notify.py)."""
        return getattr(self.inner, "notifies_changes", False) is True

    # ---- erasure -------------------------------------------------------------------------------

    @property
    def keeps_epochs(self) -> bool:
        """Whether it keeps erasure epochs (else the runtime keeps them, for this process only)."""
        return getattr(self.inner, "erasure_epoch", None) is not None

    async def erasure_epoch(self, owner_id: str) -> int:
        read = self._optional("erasure_epoch")
        return 0 if read is None else int(await read(owner_id))

    async def delete_owner(self, owner_id: str) -> dict[str, int]:
        delete = getattr(self.inner, "delete_owner", None)
        if delete is None:
            raise MemoryRuntimeError("this memory provider cannot delete an owner")
        removed: dict[str, int] = await delete(owner_id)
        return removed

    async def export_owner(self, owner_id: str, progress: Callable[[str, int], None] | None = None,
                           ) -> dict[str, builtins.list[dict[str, Any]]] | None:
        """Everything stored of the owner, per table or file; None when it cannot export (the runtime
        exports the documents)."""
        export = getattr(self.inner, "export_owner", None)
        if export is None:
            return None
        tables: dict[str, builtins.list[dict[str, Any]]] = await export(owner_id, progress)
        return tables

    async def purge_expired(self) -> dict[str, int]:
        purge = getattr(self.inner, "purge_expired", None)
        removed: dict[str, int] = await purge() if purge is not None else {}
        return removed

    # ---- the owner-key fingerprint (internal/memory/owner.py verify_secret) -----------------------

    @property
    def records_key_fingerprint(self) -> bool:
        return getattr(self.inner, "key_fingerprint", None) is not None

    async def key_fingerprint(self) -> str | None:
        fingerprint: str | None = await self._required("key_fingerprint")()
        return fingerprint

    async def stored_owner_count(self) -> int:
        count: int = await self._required("stored_owner_count")()
        return count

    async def set_key_fingerprint(self, fingerprint: str) -> None:
        await self._required("set_key_fingerprint")(fingerprint)

    # ---- session digests -------------------------------------------------------------------------

    @property
    def keeps_session_digests(self) -> bool:
        return self._optional("add_session_digest") is not None

    async def add_session_digest(self, owner_id: str, digest: SessionDigest, retention_s: float, *,
                                 max_per_owner: int, erasure_epoch: int | None = None,
                                 memory_revision: int | None = None) -> None:
        """`memory_revision` reaches only a provider that takes it (one that can refuse a digest judged
        against a `memory` document that has moved on since)."""
        add = self._required("add_session_digest")
        guard = {"memory_revision": memory_revision} if memory_revision is not None and \
            "memory_revision" in inspect.signature(add).parameters else {}
        await add(owner_id, digest, retention_s, erasure_epoch=erasure_epoch, max_per_owner=max_per_owner, **guard)

    async def session_digests(self, owner_id: str, limit: int = 5) -> builtins.list[SessionDigest]:
        read = getattr(self.inner, "session_digests", None)
        return [] if read is None else list(await read(owner_id, limit))

    async def scrub_session_digests(self, owner_id: str, words: set[str]) -> int:
        """How many digests lost a removed fact (0 when it keeps none, or answers something else)."""
        scrub = self._optional("scrub_session_digests")
        if scrub is None:
            return 0
        changed = await scrub(owner_id, words)
        return changed if isinstance(changed, int) and not isinstance(changed, bool) else 0

    # ---- the task ledger -------------------------------------------------------------------------

    @property
    def keeps_tasks(self) -> bool:
        return self._optional("record_task") is not None

    async def record_task(self, owner_id: str, entry: TaskEntry, *, erasure_epoch: int | None, retention_s: float,
                          terminal_keep_s: float, max_per_owner: int) -> None:
        await self._required("record_task")(owner_id, entry, erasure_epoch=erasure_epoch,
                                                 retention_s=retention_s, terminal_keep_s=terminal_keep_s,
                                                 max_per_owner=max_per_owner)

    async def tasks(self, owner_id: str, task_ids: builtins.list[str]) -> builtins.list[TaskEntry]:
        read = getattr(self.inner, "tasks", None)
        return [] if read is None else list(await read(owner_id, task_ids))

    # ---- operators -------------------------------------------------------------------------------

    async def owners(self, limit: int = 100, offset: int = 0) -> builtins.list[OwnerSummary] | None:
        """A page of the stored owners; None when it cannot list them."""
        listing = getattr(self.inner, "owners", None)
        return None if listing is None else list(await listing(limit, offset))

    async def health(self) -> object:
        """What its health() answered (awaited when it is a coroutine), unchecked: the runtime checks it
        is a Health (internal/memory/surface.py). Health(True) from a provider that has no health()."""
        check = getattr(self.inner, "health", None)
        if check is None:
            return Health(True)
        answer = check()
        if inspect.isawaitable(answer):
            answer = await answer
        return answer

    async def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            await close()
