"""FrontendMemoryRuntime: the only door to caller memory.

The pipeline, the memory tool, the HTTP control plane, the CLI, the digest writer and reconciliation
all come through here, never to a provider or the database directly. The runtime:
- resolves exact edits against the latest document, one writer per owner at a time;
- checks `expectedRevision` (stale -> StaleRevision, 409) and lets the provider's compare-and-set catch
  writers on other nodes;
- refuses sensitive content, records every attempt in the audit log (never the text);
- tells subscribers (the owner's live calls and control-plane sockets) when something actually
  changed, and nothing when an edit was a no-op or failed;
- believes nothing a provider answers unchecked (internal/memory/results.py: scopes, revisions, bounds;
  an apply() that changed nothing is a no-op) and offers its optional methods, capability-checked and
  with their failures contained (internal/memory/surface.py);
- carries every writer's erasure epoch to the provider, so nothing begun before an erasure of the
  owner lands after it (providers without epochs get the same check here, within this process).

It holds the provider adapted (internal/memory/adapters.py: every optional method filled in, typed), so
it never asks a provider what it has.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from voicegate.internal.config.providers import MemoryConfig
from voicegate.internal.conversation.text import control_characters
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.memory import documents as edits
from voicegate.internal.memory.adapters import AdaptedProvider
from voicegate.internal.memory.audit import AuditLog
from voicegate.internal.memory.digest import forgotten_words
from voicegate.internal.memory.editing import Action, resolve_edit
from voicegate.internal.memory.errors import (
    UNKNOWN_EPOCH,
    CallerErased,
    EditRejected,
    MemoryRuntimeError,
    MemoryUnavailable,
    SensitiveContent,
    StaleRevision,
)
from voicegate.internal.memory.filtering import SensitiveFilter
from voicegate.internal.memory.injection import neutralise_for_storage
from voicegate.internal.memory.listeners import Listener, OwnerListeners
from voicegate.internal.memory.locks import OwnerLocks
from voicegate.internal.memory.owner import OwnerKeys, OwnerSecret, verify_secret
from voicegate.internal.memory.provider import (
    SCOPES,
    ApplyResult,
    ChangeContext,
    ChangeSource,
    ListOptions,
    MemoryChange,
    MemoryDocument,
    OwnerErased,
    ProviderCapabilities,
    QueryOptions,
    RevisionConflict,
    Scope,
)
from voicegate.internal.memory.records import SessionDigest
from voicegate.internal.memory.results import applied_documents, valid_documents
from voicegate.internal.memory.surface import ProviderSurface

__all__ = [
    "UNKNOWN_EPOCH",
    "CallerErased",
    "EditOutcome",
    "EditRejected",
    "FrontendMemoryRuntime",
    "MemoryRuntimeError",
    "MemoryUnavailable",
    "SensitiveContent",
    "StaleRevision",
]

log = logging.getLogger(__name__)

DAY_S = 86400.0
NO_CHANGE = "provider_changed_nothing"  # audit error of a write its provider reported as no change
WRITE_ATTEMPTS = 3  # tries of one write that keeps losing the race to another node's


@dataclass(frozen=True, slots=True)
class WritePolicy:
    """What an exact edit and a whole-document write (digest writer, reconciliation) do differently in
    the one write loop (`FrontendMemoryRuntime._write`)."""

    operation: str  # the audit's operation: the edit's action, or "set"
    erased: str  # what CallerErased says when the owner was erased since the writer began
    # An edit audits a no-op, answers a provider failure with MemoryUnavailable, and a lost race with
    # StaleRevision (at once when the client named the revision it expected, else after the last try);
    # a whole-document write retries every lost race, then gives up, and lets a failure through as is.
    edit: bool
    retry_conflicts: bool


@dataclass(frozen=True, slots=True)
class EditOutcome:
    changed: bool
    documents: dict[Scope, MemoryDocument]
    # The words of the facts the edit removed from `memory` (digest.forgotten_words): not to be restated.
    forgotten: frozenset[str] = frozenset()


class FrontendMemoryRuntime(ProviderSurface):
    def __init__(self, provider: AdaptedProvider, config: MemoryConfig, keys: OwnerKeys, *,
                 audit: AuditLog | None = None, sensitive: SensitiveFilter | None = None,
                 secret: OwnerSecret | None = None, outbox_dir: Path | None = None) -> None:
        self.provider = provider
        self.config = config
        self.keys = keys
        self.audit = audit
        self.sensitive = sensitive or SensitiveFilter(config.sensitive_patterns)
        self.capabilities: ProviderCapabilities = provider.capabilities
        self._secret = secret
        self.outbox_dir = outbox_dir  # where this process keeps pending hang-up writes (internal/memory/outbox)
        self._locks = OwnerLocks()
        # Erasure epochs kept here for providers that keep none (one process only; see `epoch`).
        self._local_epochs: dict[str, int] = {}
        self._listeners = OwnerListeners()
        # Called after an owner's memory changed, locally; a multi-node notifier plugs in here.
        self.on_changed: list[Callable[[str], None]] = []
        # Called with (source, outcome) for every write attempt; metrics plug in here (no owner, no text).
        self.on_operation: list[Callable[[str, str], None]] = []

    @property
    def retention_s(self) -> float:
        return self.config.retention_days * DAY_S

    # ---- owners ----------------------------------------------------------------------------------

    def owner_key(self, identity: CallerIdentity) -> str | None:
        """The storage key of a verified caller; None for anonymous callers (no memory at all)."""
        return self.keys.for_identity(identity)

    async def verify_owner_key(self) -> None:
        """Refuse to run with a secret that would orphan stored memory (raises OwnerKeySecretError);
        otherwise record its fingerprint and write a newly generated secret to its file."""
        if self._secret is not None:
            await verify_secret(self.provider, self._secret)

    async def epoch(self, owner: str) -> int:
        """The owner's erasure epoch now: a writer records it when it starts and writes with it."""
        if not self.provider.keeps_epochs:
            return self._local_epochs.get(owner, 0)
        return await self.provider.erasure_epoch(owner)

    # ---- reads -----------------------------------------------------------------------------------

    async def prefetch(self, owner: str, timeout_s: float | None = None) -> bool:
        """Warm the provider's cache for a call; False (and a log line) when memory is unreachable."""
        limit = timeout_s if timeout_s is not None else self.config.read_timeout_ms / 1000.0
        try:
            async with asyncio.timeout(limit):
                await self.provider.prefetch(owner)
            return True
        except TimeoutError:
            log.warning("memory read timed out; the call goes on without memory", extra={"timeout_s": limit})
        except Exception as exc:
            log.warning("memory unavailable; the call goes on without it: %s", type(exc).__name__)
        return False

    def snapshot_known(self, owner: str) -> bool:
        """Whether the synchronous snapshot holds this owner's documents as read (a provider that keeps
        no cache of its own, or cannot say, is taken at its word)."""
        try:
            return self.provider.cached(owner)
        except Exception:
            return False

    def documents(self, owner: str) -> dict[Scope, MemoryDocument]:
        """Both documents from the provider's synchronous snapshot (empty ones when absent or unreadable:
        the prompt path goes on without memory rather than fail)."""
        try:
            return self._listed(owner)
        except MemoryUnavailable as exc:
            log.warning("memory snapshot unreadable; going on without it: %s", exc.message)
            return {scope: MemoryDocument(scope) for scope in SCOPES}

    def _listed(self, owner: str) -> dict[Scope, MemoryDocument]:
        """The provider's snapshot, normalised (internal/memory/results.py); raises when it fails, so a
        writer never mistakes an unreadable document for an empty one."""
        try:
            answer = self.provider.list(owner, ListOptions(self.config.max_chars))
        except Exception as exc:
            raise MemoryUnavailable(f"memory is unavailable ({type(exc).__name__})") from None
        found = valid_documents(answer, self.config.max_chars)
        return {scope: found.get(scope, MemoryDocument(scope)) for scope in SCOPES}

    async def latest(self, owner: str) -> dict[Scope, MemoryDocument]:
        """The documents as stored now (refreshing the cache first); raises when memory is unreachable."""
        try:
            await self.provider.prefetch(owner)
        except Exception as exc:
            raise MemoryUnavailable(f"memory is unavailable ({type(exc).__name__})") from None
        return self._listed(owner)

    def projection(self, owner: str) -> tuple[str, str]:
        """(user preferences, long-term memory) as the model may see them: template comments stripped.
        Bounding and fencing them for the prompt is internal/memory/injection.py's job, in one place."""
        docs = self.documents(owner)
        unbounded = 1 << 62
        user, _ = edits.project_for_model(docs["user"].content, docs["user"].format, unbounded)
        memory, _ = edits.project_for_model(docs["memory"].content, docs["memory"].format, unbounded)
        return user, memory

    async def query(self, owner: str, text: str, top_k: int | None = None) -> list[str]:
        if not self.capabilities.semantic_query:
            return []
        result = await self.provider.query(owner, text, QueryOptions(top_k=top_k or self.config.retrieval_top_k),
                                           None)
        return list(result.memories)

    # ---- writes ----------------------------------------------------------------------------------

    async def edit(self, owner: str, scope: Scope, action: Action, *, content: str = "", old_text: str = "",
                   new_text: str = "", expected_revision: int | None = None,
                   context: ChangeContext) -> EditOutcome:
        """One atomic edit of one document, starting from the latest version."""
        if scope not in SCOPES:
            raise EditRejected("unknown_document", f"unknown document {scope!r}; use 'user' or 'memory'")
        content, new_text = neutralise_for_storage(content), neutralise_for_storage(new_text)
        unwanted = control_characters(content + old_text + new_text)
        if unwanted:  # refused here, as bad input, rather than by the database as a failed write
            raise EditRejected("control_characters", f"the text holds control characters ({', '.join(unwanted)}); "
                               "remove them and try again")

        async def compose(current: MemoryDocument, docs: dict[Scope, MemoryDocument]) -> MemoryChange:
            if expected_revision is not None and expected_revision != current.revision:
                await self._audit(owner, context, action, "stale", scope, expected_revision, current.revision,
                                  "stale_revision")
                raise StaleRevision(f"the {scope} document is at revision {current.revision}, "
                                    f"not {expected_revision}; reload and try again", docs)
            try:
                updated = resolve_edit(scope, current.content, action, content=content, old_text=old_text,
                                       new_text=new_text, max_chars=self.config.max_chars, fmt=current.format)
            except edits.EditError as exc:
                await self._audit(owner, context, action, "rejected", scope, current.revision, None, exc.code)
                raise EditRejected(exc.code, exc.message) from None
            reason = self.sensitive.reason_for_edit(current.content, updated)
            if reason:
                await self._audit(owner, context, action, "refused", scope, current.revision, None,
                                  "sensitive_content")
                raise SensitiveContent(f"not saved: {reason}")
            return MemoryChange(scope, updated, current.revision, action, old_text, new_text, current.format)

        async def landed(before: MemoryDocument, change: MemoryChange) -> frozenset[str]:
            if scope != "memory":
                return frozenset()
            forgotten = forgotten_words(before.content, change.content, before.format)
            if forgotten:
                await self._forget_in_session_digests(owner, forgotten, context)
            return frozenset(forgotten)

        async with self._locks.hold(owner):
            context = await self._writer_context(owner, context)
            policy = WritePolicy(action, "this caller's memory was erased during the call; nothing was saved",
                                 edit=True, retry_conflicts=expected_revision is None)
            return await self._write(owner, scope, context, policy, compose, landed)

    async def set_document(self, owner: str, scope: Scope, content: str, context: ChangeContext,
                           transform: Callable[[MemoryDocument], str] | None = None) -> EditOutcome:
        """Replace a whole document computed from the latest one (digest writer, reconciliation); the
        document keeps its format."""

        async def compose(current: MemoryDocument, docs: dict[Scope, MemoryDocument]) -> MemoryChange:
            updated = transform(current) if transform is not None else content
            return MemoryChange(scope, updated, current.revision, format=current.format)

        async with self._locks.hold(owner):
            context = await self._writer_context(owner, context)
            policy = WritePolicy("set", "this caller's memory was erased after the call began; not saved",
                                 edit=False, retry_conflicts=True)
            return await self._write(owner, scope, context, policy, compose)

    async def _write(self, owner: str, scope: Scope, context: ChangeContext, policy: WritePolicy,
                     compose: Callable[[MemoryDocument, dict[Scope, MemoryDocument]], Awaitable[MemoryChange]],
                     landed: Callable[[MemoryDocument, MemoryChange], Awaitable[frozenset[str]]] | None = None,
                     ) -> EditOutcome:
        """The one write loop of `edit` and `set_document`, the owner's lock held: read the latest
        document, `compose` the change from it (it raises, audited, to refuse), apply it, audit what
        happened, and tell subscribers when something changed. A write that lost a race with another
        node (RevisionConflict) is redone on top of the winner's version, up to WRITE_ATTEMPTS times."""
        for attempt in range(WRITE_ATTEMPTS):
            docs = await self.latest(owner)
            current = docs[scope]
            change = await compose(current, docs)
            if change.content == current.content:
                if policy.edit:  # a whole-document write that changes nothing is not worth an audit line
                    await self._audit(owner, context, policy.operation, "unchanged", scope, current.revision,
                                      current.revision)
                return EditOutcome(False, docs)
            try:
                result = await self._apply(owner, [change], context)
            except OwnerErased:
                await self._audit(owner, context, policy.operation, "refused", scope, current.revision, None,
                                  "erased")
                raise CallerErased(policy.erased) from None
            except RevisionConflict as conflict:
                if policy.edit and (not policy.retry_conflicts or attempt == WRITE_ATTEMPTS - 1):
                    await self._audit(owner, context, policy.operation, "stale", scope, current.revision,
                                      conflict.current_revision, "stale_revision")
                    raise StaleRevision(str(conflict), await self.latest(owner)) from None
                continue  # another node wrote first: redo the write on top of its version
            except Exception as exc:  # audited; an edit's caller gets MemoryUnavailable, a set's decides on a retry
                await self._audit(owner, context, policy.operation, "failed", scope, current.revision, None,
                                  type(exc).__name__)
                if policy.edit:
                    raise MemoryUnavailable(f"memory could not be saved ({type(exc).__name__})") from None
                raise
            written = applied_documents(result, scope, self.config.max_chars)
            if written is None:  # the provider changed nothing (or will not say what): nothing to announce
                await self._audit(owner, context, policy.operation, "unchanged", scope, current.revision,
                                  current.revision, NO_CHANGE)
                return EditOutcome(False, docs)
            docs.update(written)
            await self._audit(owner, context, policy.operation, "applied", scope, current.revision,
                              docs[scope].revision)
            forgotten = await landed(current, change) if landed is not None else frozenset()
            self._notify(owner)
            return EditOutcome(True, docs, forgotten)
        raise MemoryUnavailable("memory kept changing underneath this write; giving up")

    async def _writer_context(self, owner: str, context: ChangeContext) -> ChangeContext:
        """The context a provider sees: retention set here, and the writer's erasure epoch (a writer with
        none, such as a PATCH, starts now: the epoch read here, before the document it edits)."""
        epoch = context.erasure_epoch
        if epoch is None:
            try:
                epoch = await self.epoch(owner)
            except Exception as exc:
                raise MemoryUnavailable(f"memory is unavailable ({type(exc).__name__})") from None
        return replace(context, retention_s=self.retention_s, erasure_epoch=epoch)

    async def _apply(self, owner: str, changes: list[MemoryChange], context: ChangeContext) -> ApplyResult:
        if not self.provider.keeps_epochs:
            current = self._local_epochs.get(owner, 0)
            if context.erasure_epoch is not None and context.erasure_epoch != current:
                raise OwnerErased(current)
        return await self.provider.apply(owner, changes, context)

    async def add_session_digest(self, owner: str, digest: SessionDigest, retention_s: float,
                                 context: ChangeContext, memory_revision: int | None = None) -> bool:
        """Record a call's session digest (bounded per owner); False when the provider keeps none. With
        `memory_revision`, a provider that can check it refuses (RevisionConflict) when the `memory`
        document moved past it: the digest was judged against a version that is gone."""
        if not self.provider.keeps_session_digests:
            return False
        async with self._locks.hold(owner):
            context = await self._writer_context(owner, context)
            if not self.provider.keeps_epochs and context.erasure_epoch != self._local_epochs.get(owner, 0):
                await self._audit(owner, context, "session_digest", "refused", error="erased")
                raise CallerErased("this caller's memory was erased after the call began; not saved")
            try:
                await self.provider.add_session_digest(owner, digest, retention_s, erasure_epoch=context.erasure_epoch,
                                                       max_per_owner=self.config.max_session_digests,
                                                       memory_revision=memory_revision)
            except RevisionConflict:
                raise
            except OwnerErased:
                await self._audit(owner, context, "session_digest", "refused", error="erased")
                raise CallerErased("this caller's memory was erased after the call began; not saved") from None
            except Exception as exc:
                await self._audit(owner, context, "session_digest", "failed", error=type(exc).__name__)
                raise
            await self._audit(owner, context, "session_digest", "applied")
        return True

    async def _forget_in_session_digests(self, owner: str, words: set[str], context: ChangeContext) -> None:
        """A fact just left `memory`: the owner's session digests lose the topics and gists that state it,
        so `recall` cannot bring it back. Called with the owner's lock held, after the edit landed; what
        it changed is audited as a count, a failure by its error type (never text), and the edit stands."""
        try:
            count = await self.provider.scrub_session_digests(owner, words)
        except Exception as exc:
            log.warning("session digests could not forget a removed fact: %s", type(exc).__name__)
            await self._audit(owner, context, "scrub_session_digests", "failed", error=type(exc).__name__)
            return
        if count:  # a scrub that found nothing to take wrote nothing
            await self._audit(owner, context, "scrub_session_digests", "applied", extra={"digests": count})

    # ---- lifecycle of owners ---------------------------------------------------------------------

    async def delete_owner(self, owner: str, source: ChangeSource = "cli") -> dict[str, int]:
        """Erase everything of `owner` and raise its erasure epoch, holding the writers' lock."""
        async with self._locks.hold(owner):
            removed = await self.provider.delete_owner(owner)  # MemoryRuntimeError when it cannot
            self._local_epochs[owner] = self._local_epochs.get(owner, 0) + 1
            self.provider.invalidate(owner)
            await self._audit(owner, ChangeContext(source), "delete_owner", "applied", extra={"removed": removed})
        self._notify(owner)
        return removed

    async def export(self, owner: str, progress: Callable[[str, int], None] | None = None,
                     ) -> dict[str, list[dict[str, Any]]]:
        """Everything stored of `owner`, per table or file, with nothing left out (subject access)."""
        tables = await self.provider.export_owner(owner, progress)
        if tables is not None:
            return tables
        docs = await self.latest(owner)
        return {"documents": [{"scope": d.scope, "content": d.content, "revision": d.revision}
                              for d in docs.values() if d.revision]}

    async def purge_expired(self) -> dict[str, int]:
        removed = await self.provider.purge_expired()
        if self.audit is not None:
            pruned = await self.audit.prune()
            if pruned:
                removed["audit files"] = pruned
        return removed

    # ---- notification ----------------------------------------------------------------------------

    def subscribe(self, owner: str, listener: Listener) -> Callable[[], None]:
        """Call `listener` (synchronously, no content) after each persisted change of `owner`'s memory."""
        return self._listeners.subscribe(owner, listener)

    def _notify(self, owner: str) -> None:
        self._listeners.tell(owner)
        for hook in self.on_changed:
            hook(owner)

    async def changed_elsewhere(self, owner: str) -> None:
        """Another node changed `owner`'s memory: reload the cached copy if calls here use it, then tell
        local subscribers (live calls refresh at their next idle point, clients get memory.changed)."""
        self.provider.invalidate(owner)
        if self._listeners.has(owner):
            await self.prefetch(owner)
        self._listeners.tell(owner)

    async def resync(self) -> None:
        """Changes may have been missed (the change listener was disconnected): drop every cached copy,
        reload the owners whose calls are live here and tell their subscribers."""
        self.provider.invalidate_all()
        for owner in self._listeners.owners():
            await self.prefetch(owner)
            self._listeners.tell(owner)

    async def audit_refused(self, owner: str, context: ChangeContext, operation: str, error: str) -> None:
        """A write the store refused outside an edit (a hang-up step the outbox dropped)."""
        await self._audit(owner, context, operation, "refused", error=error)

    async def _audit(self, owner: str, context: ChangeContext, operation: str, outcome: str, scope: str = "",
                     base: int | None = None, revision: int | None = None, error: str = "",
                     extra: dict[str, Any] | None = None) -> None:
        for hook in self.on_operation:
            hook(context.source, outcome)
        if context.trace_id:  # links the write to the turn or request that made it
            extra = {**(extra or {}), "trace_id": context.trace_id}
        if self.audit is not None:
            await self.audit.record(owner, source=context.source, operation=operation, outcome=outcome, scope=scope,
                                    base_revision=base, revision=revision, error=error,
                                    session_id=context.session_id, extra=extra)

    async def close(self) -> None:
        await self.provider.close()
