"""The MemoryProvider protocol (version 2): what any store of caller memory implements.

A port of the seed design. Two logical documents per owner: `user` (the caller's explicit preferences:
how to address them, reply style) and `memory` (durable facts, decisions and the digest of past calls,
evidence only). Providers are injected at the composition root
(`create_gateway_application(memory_provider=...)`) and reached only through FrontendMemoryRuntime.

- `describe()` names the provider, its protocol version and its optional capabilities.
- `list()` is required and SYNCHRONOUS: a bounded snapshot from the provider's own cache, because the
  prompt path never waits on I/O. `prefetch()` (optional) lets the runtime warm that cache when a call
  is set up, before the first prompt is built.
- `apply()` receives edits already resolved by the runtime (each change carries the full new content
  and the revision it was computed from); a provider must refuse a change whose base revision is no
  longer current (raise `RevisionConflict`), so concurrent writers never lose an update.
- `query()` when `semantic_query`; `observe()`/`flush()` when `session_observation`; `observe_audio()`
  (synchronous, bounded, on the audio hot path) when `audio_stream_observation`.
- `health()`, `close()`, `delete_owner()`, `purge_expired()` and `owners()` are optional.

Erasure (see docs/memory.md, "Erasure"): a provider that stores memory where another process can reach
it keeps an **erasure epoch** per owner, a counter that `delete_owner()` raises in the same step (same
lock, same transaction) that removes the owner's data. Every write carries the epoch its writer started
from (`ChangeContext.erasure_epoch`); a provider refuses a write whose epoch is no longer current by
raising `OwnerErased`, so nothing that began before an erasure (a hang-up digest, reconciliation, a
session digest, a tool call, a PATCH) can bring back what was erased. Optional methods for it:
`erasure_epoch(owner)`, `export_owner(owner, progress)`, and the owner-key fingerprint trio
`key_fingerprint()`, `set_key_fingerprint(fingerprint)`, `stored_owner_count()`.

Version 1 providers (`describe`, `list`, `apply` only, no `protocol_version` or capabilities) keep
working: every capability is off. The composition root wraps whatever provider it has, once, in
internal/memory/adapters.py's `adapt()`, which fills in the optional methods a provider lacks; the
runtime holds that typed adapter and never asks a provider what it has.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

MEMORY_PROVIDER_PROTOCOL_VERSION = 2

Scope = Literal["user", "memory"]
SCOPES: tuple[Scope, ...] = ("user", "memory")
DocumentFormat = Literal["markdown", "text"]
ChangeSource = Literal["tool", "api", "cli", "reconciliation", "digest", "observation"]


class OwnerErased(Exception):
    """The owner was erased after this write's writer started: the write must not land."""

    def __init__(self, current_epoch: int) -> None:
        super().__init__(f"this caller's memory was erased (erasure epoch {current_epoch})")
        self.current_epoch = current_epoch


class RevisionConflict(Exception):
    """The document changed since the revision a change was computed from."""

    def __init__(self, scope: Scope, current_revision: int) -> None:
        super().__init__(f"the {scope} document is at revision {current_revision}")
        self.scope = scope
        self.current_revision = current_revision


@dataclass(frozen=True, slots=True)
class ProviderCapabilities:
    semantic_query: bool = False
    session_observation: bool = False
    audio_stream_observation: bool = False


@dataclass(frozen=True, slots=True)
class ProviderDescription:
    key: str
    label: str
    protocol_version: int = MEMORY_PROVIDER_PROTOCOL_VERSION
    capabilities: ProviderCapabilities = field(default_factory=ProviderCapabilities)


@dataclass(frozen=True, slots=True)
class MemoryDocument:
    scope: Scope
    content: str = ""
    revision: int = 0  # 0: the document does not exist yet
    format: DocumentFormat = "markdown"
    updated_at: float | None = None


@dataclass(frozen=True, slots=True)
class ListOptions:
    max_chars: int
    scopes: tuple[Scope, ...] = SCOPES


@dataclass(frozen=True, slots=True)
class MemoryChange:
    """One resolved edit: the document's new content, computed from `base_revision`."""

    scope: Scope
    content: str
    base_revision: int
    action: Literal["append", "replace", "set"] = "set"
    # The edit as requested (kept for providers that store edits rather than documents).
    old_text: str = ""
    new_text: str = ""
    # The document's format, kept as it was: a provider stores it with the content.
    format: DocumentFormat = "markdown"


@dataclass(frozen=True, slots=True)
class ChangeContext:
    """Who asked for a change, owned by the gateway (never by the model)."""

    source: ChangeSource
    session_id: str | None = None
    turn: int | None = None
    trace_id: str | None = None
    retention_s: float | None = None  # how long the stored change lives (the runtime sets it)
    # The owner's erasure epoch when this writer started (None: the provider does not check).
    erasure_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class ApplyResult:
    changed: int
    documents: list[MemoryDocument]


@dataclass(frozen=True, slots=True)
class QueryOptions:
    top_k: int = 5
    scopes: tuple[Scope, ...] = ("memory",)


@dataclass(frozen=True, slots=True)
class QueryResult:
    memories: list[str]
    context: str = ""


@dataclass(frozen=True, slots=True)
class Exchange:
    """A completed user/assistant exchange, for providers that learn from conversations."""

    user: str
    assistant: str
    at: float = field(default_factory=time.time)


@dataclass(frozen=True, slots=True)
class AudioEvent:
    kind: Literal["audio", "speech_start", "speech_end", "session_start", "session_end"]
    pcm: bytes = b""
    sample_rate: int = 0


@dataclass(frozen=True, slots=True)
class SessionContext:
    session_id: str
    transport: str = ""


@dataclass(frozen=True, slots=True)
class Health:
    ok: bool
    detail: str = ""


@runtime_checkable
class MemoryProvider(Protocol):
    def describe(self) -> ProviderDescription: ...

    def list(self, owner_id: str, options: ListOptions) -> Sequence[MemoryDocument]: ...

    async def apply(self, owner_id: str, changes: Sequence[MemoryChange], context: ChangeContext) -> ApplyResult: ...


def _field(description: Any, name: str, camel: str) -> Any:
    """A field of a provider's description, which hand-written providers may return as a plain dict
    (snake_case or camelCase keys, as the seed's JSON spells them)."""
    if isinstance(description, dict):
        return description.get(name, description.get(camel))
    return getattr(description, name, None)


def protocol_version(description: Any) -> int:
    """The protocol version a description declares (1 when it declares none or nonsense)."""
    version = _field(description, "protocol_version", "protocolVersion")
    try:
        return int(version) if version is not None and not isinstance(version, bool) else 1
    except (TypeError, ValueError):
        return 1


def normalised_description(description: Any) -> ProviderDescription:
    """What a provider's describe() answered, as a ProviderDescription: hand-written providers may answer
    with another object or a plain dict; a v1 description (no version) has no capabilities."""
    if isinstance(description, ProviderDescription):
        if description.protocol_version < 2 and description.capabilities != ProviderCapabilities():
            return ProviderDescription(description.key, description.label, description.protocol_version)
        return description
    key, label = _field(description, "key", "key"), _field(description, "label", "label")
    version = protocol_version(description)
    return ProviderDescription(key if isinstance(key, str) and key else "unknown",
                               label if isinstance(label, str) else "", version,
                               _capabilities(_field(description, "capabilities", "capabilities"))
                               if version >= 2 else ProviderCapabilities())


def _capabilities(capabilities: Any) -> ProviderCapabilities:
    if isinstance(capabilities, ProviderCapabilities):
        return capabilities
    if isinstance(capabilities, dict):  # accept plain dicts from hand-written providers
        return ProviderCapabilities(
            semantic_query=bool(capabilities.get("semantic_query") or capabilities.get("semanticQuery")),
            session_observation=bool(capabilities.get("session_observation")
                                     or capabilities.get("sessionObservation")),
            audio_stream_observation=bool(capabilities.get("audio_stream_observation")
                                          or capabilities.get("audioStreamObservation")),
        )
    return ProviderCapabilities()

