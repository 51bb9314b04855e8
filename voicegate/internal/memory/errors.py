"""What can go wrong with a memory operation, as domain errors with an HTTP status and a stable code."""

from __future__ import annotations

from voicegate.internal.memory.provider import MemoryDocument, Scope


class MemoryRuntimeError(Exception):
    status = 400
    code = "memory_error"

    def __init__(self, message: str, documents: dict[Scope, MemoryDocument] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.documents = documents or {}


class StaleRevision(MemoryRuntimeError):
    status = 409
    code = "stale_revision"


class EditRejected(MemoryRuntimeError):
    status = 422

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class SensitiveContent(MemoryRuntimeError):
    status = 422
    code = "sensitive_content"


class MemoryUnavailable(MemoryRuntimeError):
    status = 503
    code = "memory_unavailable"


class CallerErased(MemoryRuntimeError):
    """The caller's memory was erased after this writer started (a call live during the erasure)."""

    status = 409
    code = "memory_erased"


# The epoch of a writer that could not learn the owner's erasure epoch (memory was unreachable when its
# call started): no epoch is ever negative, so all its writes are refused rather than risk resurrecting.
UNKNOWN_EPOCH = -1
