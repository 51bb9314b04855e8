"""Memory fixtures: every built-in provider behind the same runtime, PostgreSQL real (pgserver)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import tone_driven
from voicegate.internal.config import load_config
from voicegate.internal.config.providers import MemoryConfig, PgvectorConfig
from voicegate.internal.db import Database
from voicegate.internal.memory.adapters import adapt
from voicegate.internal.memory.audit import AuditLog
from voicegate.internal.memory.owner import OwnerKeys
from voicegate.internal.memory.providers.inmemory import InMemoryProvider
from voicegate.internal.memory.providers.markdown import MarkdownProvider
from voicegate.internal.memory.providers.pgvector import PgvectorProvider
from voicegate.internal.memory.runtime import DAY_S, FrontendMemoryRuntime

RETENTION_S = 90 * DAY_S


@pytest.fixture(scope="session")
def embedder() -> Any:
    from voicegate.internal.rag.embedding import WordLlamaEmbedder

    return WordLlamaEmbedder()


@pytest.fixture
async def database(fresh_db: str, tmp_path: Path) -> AsyncIterator[Database]:
    db = Database(PgvectorConfig(connection_string=fresh_db), tmp_path)
    await db.open()
    yield db
    await db.close()


@pytest.fixture(params=["memory", "markdown", "pgvector"])
async def provider(request: pytest.FixtureRequest, tmp_path: Path, embedder: Any) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield InMemoryProvider(RETENTION_S)
    elif request.param == "markdown":
        yield MarkdownProvider(tmp_path / "md", RETENTION_S)
    else:
        db = Database(PgvectorConfig(connection_string=request.getfixturevalue("fresh_db")), tmp_path)
        await db.open()
        yield PgvectorProvider(db, embedder, RETENTION_S)
        await db.close()


def make_runtime(provider: Any, tmp_path: Path, **memory: Any) -> FrontendMemoryRuntime:
    config = MemoryConfig(enabled=True, **memory)
    return FrontendMemoryRuntime(adapt(provider), config, OwnerKeys(b"test-secret"),
                                 audit=AuditLog(tmp_path / "memory-audit.jsonl"))


@pytest.fixture
def runtime(provider: Any, tmp_path: Path) -> FrontendMemoryRuntime:
    return make_runtime(provider, tmp_path)


def base_config(tmp_path: Path) -> Any:
    config = load_config(None)
    config.server.data_dir = str(tmp_path / "data")
    return tone_driven(config)
