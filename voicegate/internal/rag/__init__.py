"""Knowledge retrieval (pgvector, Supabase), embeddings, ingestion.

The pipeline side: `build_retriever` at start-up, one `TurnRetrieval` per call, `needs_retrieval` as
the gate. The operator side: `build_store` and `ingest_files` (what `voicegate rag` runs).
"""

from voicegate.internal.rag.backends import build_retriever, build_store
from voicegate.internal.rag.chunking import Chunk, ChunkingError, DocumentError, chunk_file
from voicegate.internal.rag.ingest import (
    IngestReport,
    KnowledgeStore,
    KnowledgeStoreError,
    SourceSummary,
    SyncResult,
    ingest_chunks,
    ingest_files,
    source_name,
)
from voicegate.internal.rag.retriever import RagConfigError, Retriever, TurnRetrieval, needs_retrieval

__all__ = [
    "Chunk",
    "ChunkingError",
    "DocumentError",
    "IngestReport",
    "KnowledgeStore",
    "KnowledgeStoreError",
    "RagConfigError",
    "Retriever",
    "SourceSummary",
    "SyncResult",
    "TurnRetrieval",
    "build_retriever",
    "build_store",
    "chunk_file",
    "ingest_chunks",
    "ingest_files",
    "needs_retrieval",
    "source_name",
]
