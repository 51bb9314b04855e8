"""Knowledge retrieval (pgvector, Supabase), embeddings, ingestion."""
