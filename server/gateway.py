"""The running server's components and their lifecycle, built from one Config.

Everything that holds a socket, a process or a pool is created here and closed here, in reverse
order, so a graceful shutdown leaves nothing behind.
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from typing import Any

from internal.config import Config
from internal.db import Database

log = logging.getLogger(__name__)


def needs_database(config: Config) -> bool:
    memory_in_postgres = config.memory.enabled and config.memory.provider == "pgvector"
    return memory_in_postgres or config.rag.provider == "pgvector"


class Gateway:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.database: Database | None = Database(config.pgvector, config.data_dir) if needs_database(config) else None
        self._stack = AsyncExitStack()
        self.started = False

    async def start(self) -> None:
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        if self.database is not None:
            await self.database.open()
            self._stack.push_async_callback(self.database.close)
        self.started = True
        log.info("gateway started")

    async def stop(self) -> None:
        if not self.started:
            return
        self.started = False
        await self._stack.aclose()
        log.info("gateway stopped")

    async def health(self) -> dict[str, Any]:
        components: dict[str, Any] = {"config": {"ok": True}}
        if self.database is not None:
            components["database"] = await self.database.health()
        ok = all(component.get("ok") for component in components.values())
        return {"status": "ok" if ok else "degraded", "components": components}
