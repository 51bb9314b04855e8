"""Build the memory runtime the config asks for (or around an injected provider)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from voicegate.internal.config import Config
from voicegate.internal.db import Database
from voicegate.internal.memory.adapters import AdaptedProvider
from voicegate.internal.memory.audit import AuditLog
from voicegate.internal.memory.outbox import OUTBOX_DIR
from voicegate.internal.memory.owner import OwnerKeys, read_secret
from voicegate.internal.memory.runtime import DAY_S, FrontendMemoryRuntime
from voicegate.internal.rag.embedding import build_embedder


def build_provider(config: Config, database: Database | None, node_id: str | None = None) -> Any:
    """`node_id` names this process in the change notices a shared PostgreSQL store sends (server/node.py)."""
    retention_s = config.memory.retention_days * DAY_S
    fence_s = config.memory.erasure_fence_s
    if config.memory.provider == "memory":
        from voicegate.internal.memory.providers.inmemory import InMemoryProvider

        return InMemoryProvider(retention_s, fence_s=fence_s)
    if config.memory.provider == "markdown":
        from voicegate.internal.memory.providers.markdown import MarkdownProvider

        directory = Path(config.memory.markdown_dir) if config.memory.markdown_dir else config.data_dir / "memory"
        return MarkdownProvider(directory, retention_s, fence_s=fence_s)
    from voicegate.internal.memory.providers.pgvector import PgvectorProvider

    if database is None:
        raise ValueError("memory.provider = pgvector needs the database")
    return PgvectorProvider(database, build_embedder(config.memory.embedding, config.openai), retention_s,
                            node_id=node_id, fence_s=fence_s)


def build_runtime(config: Config, provider: AdaptedProvider) -> FrontendMemoryRuntime:
    """The runtime around `provider`, adapted at the composition root (internal/memory/adapters.py). Call
    `await runtime.verify_owner_key()` before serving anything: it refuses a missing or replaced secret
    while owners are stored, and writes a new secret's file."""
    secret = read_secret(config.memory.owner_key_secret, config.data_dir)
    audit_path = Path(config.memory.audit_path) if config.memory.audit_path else config.data_dir / "memory-audit.jsonl"
    return FrontendMemoryRuntime(provider, config.memory, OwnerKeys(secret.value),
                                 audit=AuditLog(audit_path, retention_days=config.memory.retention_days),
                                 secret=secret, outbox_dir=config.data_dir / OUTBOX_DIR)
