"""Built-in memory providers: pgvector (PostgreSQL), memory (in-process), markdown (files)."""
