"""The configured knowledge backend: the store `voicegate rag` writes and the retriever calls read.

The one module that knows every backend (pgvector, Supabase). The backends import the seams they
implement (`KnowledgeStore` from ingest, `Retriever` and `RagConfigError` from retriever) and
nothing imports a backend except this module, so the seams never depend on their implementations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from voicegate.internal.rag.embedding import Embedder, build_embedder
from voicegate.internal.rag.ingest import KnowledgeStore
from voicegate.internal.rag.pgvector import PgvectorRetriever, PgvectorStore
from voicegate.internal.rag.retriever import RagConfigError, Retriever
from voicegate.internal.rag.supabase import PostgrestClient, SupabaseRetriever, SupabaseStore

if TYPE_CHECKING:
    from voicegate.internal.config import Config
    from voicegate.internal.db import Database


def build_store(config: Config, database: Database | None) -> KnowledgeStore:
    """The store `[rag] provider` names (pgvector: `database` must be open)."""
    if config.rag.provider == "pgvector":
        if database is None:
            raise RagConfigError("[rag] provider = \"pgvector\" needs the database")
        return PgvectorStore(database, config.pgvector.table)
    if config.rag.provider == "supabase":
        return SupabaseStore(PostgrestClient.from_config(config.supabase), config.supabase.table)
    raise RagConfigError('knowledge retrieval is off: set [rag] provider = "pgvector" or "supabase"')


def build_retriever(config: Config, database: Database | None, embedder: Embedder | None = None) -> Retriever | None:
    """The retriever `[rag] provider` names, or None when retrieval is off.

    `database` must be open for pgvector (the gateway's, shared with memory). `embedder` lets the
    caller share one embedder with memory; by default `[rag] embedding` builds one.
    """
    provider = config.rag.provider
    if not provider:
        return None
    chosen = embedder or build_embedder(config.rag.embedding, config.openai)
    if chosen is None:
        raise RagConfigError("knowledge retrieval needs an embedder; set [rag] embedding")
    if provider == "pgvector":
        if database is None:
            raise RagConfigError("[rag] provider = \"pgvector\" needs the database ([pgvector] or the embedded one)")
        return PgvectorRetriever(database, chosen, config.pgvector.table, config.rag.min_score)
    return SupabaseRetriever(PostgrestClient.from_config(config.supabase), chosen, config.supabase.function,
                             config.rag.min_score)
