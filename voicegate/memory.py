"""The memory provider contract (protocol v2): what a deployer implements to keep callers' memory in
their own service, and injects with `create_gateway_application(config, memory_provider=...)`.

This module is the stable import path; the definitions live in voicegate.internal.memory.provider and
are re-exported here unchanged. docs/memory.md, "The provider contract", describes each method;
examples/sqlite_memory_provider.py is a complete adapter.
"""

from voicegate.internal.memory.provider import (
    MEMORY_PROVIDER_PROTOCOL_VERSION,
    SCOPES,
    ApplyResult,
    AudioEvent,
    ChangeContext,
    ChangeSource,
    DocumentFormat,
    Exchange,
    Health,
    ListOptions,
    MemoryChange,
    MemoryDocument,
    MemoryProvider,
    OwnerErased,
    ProviderCapabilities,
    ProviderDescription,
    QueryOptions,
    QueryResult,
    RevisionConflict,
    Scope,
    SessionContext,
)

__all__ = [
    "MEMORY_PROVIDER_PROTOCOL_VERSION", "SCOPES", "ApplyResult", "AudioEvent", "ChangeContext", "ChangeSource",
    "DocumentFormat", "Exchange", "Health", "ListOptions", "MemoryChange", "MemoryDocument", "MemoryProvider",
    "OwnerErased", "ProviderCapabilities", "ProviderDescription", "QueryOptions", "QueryResult",
    "RevisionConflict", "Scope", "SessionContext",
]
