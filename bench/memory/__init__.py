"""Caller memory: latency at scale in PostgreSQL + pgvector, and the control plane's throughput."""
