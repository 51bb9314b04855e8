"""An embedded PostgreSQL (with pgvector) from the `pgserver` package, kept in the data directory.

Used when `[pgvector] connection_string` is empty, so a deployer gets persistent memory with no
database to install. pgserver shares one postmaster between every process that opens the same data
directory and stops it when the last one lets go.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class EmbeddedPostgresError(Exception):
    pass


class EmbeddedPostgres:
    def __init__(self, data_dir: Path) -> None:
        self.pgdata = data_dir / "postgres"
        self._server: Any = None

    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> str:
        """Start (or join) the postmaster for this data directory; return its connection URI."""
        if self._server is None:
            self._server = await asyncio.to_thread(self._start_blocking)
        uri: str = self._server.get_uri()
        return uri

    def start_sync(self) -> str:
        """`start` for code with no event loop (test fixtures, scripts)."""
        if self._server is None:
            self._server = self._start_blocking()
        uri: str = self._server.get_uri()
        return uri

    def stop_sync(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.cleanup()

    def _start_blocking(self) -> Any:
        self.pgdata.mkdir(parents=True, exist_ok=True)
        log.info("starting embedded PostgreSQL", extra={"pgdata": str(self.pgdata)})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
            import pgserver

            try:
                return pgserver.get_server(self.pgdata, cleanup_mode="stop")
            except Exception as exc:  # pgserver raises bare subprocess errors; name the cause
                log_file = self.pgdata / "log"
                tail = log_file.read_text(errors="replace")[-2000:] if log_file.exists() else ""
                raise EmbeddedPostgresError(
                    f"embedded PostgreSQL in {self.pgdata} did not start: {exc}. Log tail: {tail}"
                ) from exc

    async def stop(self) -> None:
        """Let go of the postmaster; it stops when no other process of ours still uses it."""
        server, self._server = self._server, None
        if server is not None:
            log.info("stopping embedded PostgreSQL", extra={"pgdata": str(self.pgdata)})
            await asyncio.to_thread(server.cleanup)
