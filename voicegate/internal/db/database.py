"""The database voicegate keeps memory and retrieval data in: a pool of async psycopg connections.

`Database.open` starts the embedded PostgreSQL when no connection string is configured, applies the
migrations, then opens the pool (each connection knows the pgvector `vector` type).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import psycopg
from pgvector.psycopg import register_vector_async
from psycopg_pool import AsyncConnectionPool

from voicegate.internal.config.providers import PgvectorConfig
from voicegate.internal.db.embedded import EmbeddedPostgres
from voicegate.internal.db.migrator import migrate

log = logging.getLogger(__name__)

HEALTH_PROBE_S = 1.0  # the database is asked SELECT 1 at most this often by /health


class DatabaseUnavailable(Exception):
    pass


class Database:
    def __init__(self, config: PgvectorConfig, data_dir: Path) -> None:
        self._config = config
        self._embedded = EmbeddedPostgres(data_dir) if not config.connection_string else None
        self._pool: AsyncConnectionPool | None = None
        self.uri = config.connection_string
        self._health_lock = asyncio.Lock()
        self._health_at = -HEALTH_PROBE_S
        self._health: dict[str, Any] = {}

    @property
    def embedded(self) -> bool:
        return self._embedded is not None

    @property
    def pool(self) -> AsyncConnectionPool:
        if self._pool is None:
            raise DatabaseUnavailable("the database is not open")
        return self._pool

    async def open(self, run_migrations: bool = True) -> None:
        if self._embedded is not None:
            self.uri = await self._embedded.start()
        if run_migrations:
            await self.migrate()
        pool: AsyncConnectionPool = AsyncConnectionPool(
            self.uri,
            min_size=self._config.pool_min,
            max_size=max(self._config.pool_max, self._config.pool_min, 1),
            open=False,
            configure=self._configure,
            timeout=self._config.connect_timeout_s,
            kwargs={"connect_timeout": max(1, int(self._config.connect_timeout_s))},
            reconnect_timeout=float("inf"),
        )
        await pool.open(wait=False)
        self._pool = pool

    @staticmethod
    async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
        await register_vector_async(conn)
        await conn.set_autocommit(True)

    async def migrate(self) -> list[str]:
        async with await psycopg.AsyncConnection.connect(
            self.uri, connect_timeout=max(1, int(self._config.connect_timeout_s))
        ) as conn:
            return await migrate(conn)

    async def health(self, timeout_s: float = 2.0) -> dict[str, Any]:
        """SELECT 1, at most once per HEALTH_PROBE_S however often /health is asked (concurrent askers
        share one probe): a client polling fast must not turn the endpoint into load on the database."""
        if self._pool is None:
            return {"ok": False, "error": "not open"}
        async with self._health_lock:
            if time.monotonic() - self._health_at >= HEALTH_PROBE_S:
                try:
                    async with asyncio.timeout(timeout_s), self._pool.connection() as conn:
                        await conn.execute("SELECT 1")
                    self._health = {"ok": True, "embedded": self.embedded}
                except Exception as exc:  # health reports any failure, it never raises
                    self._health = {"ok": False, "embedded": self.embedded, "error": type(exc).__name__}
                self._health_at = time.monotonic()
            return dict(self._health)

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
        if self._embedded is not None:
            await self._embedded.stop()
