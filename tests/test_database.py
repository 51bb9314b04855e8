from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest
from pgvector.psycopg import register_vector_async

from voicegate.internal.config.providers import PgvectorConfig
from voicegate.internal.db import Database, MigrationError, discover, migrate
from voicegate.internal.db.migrator import Migration


async def applied(uri: str) -> list[int]:
    async with await psycopg.AsyncConnection.connect(uri) as conn:
        cur = await conn.execute("SELECT version FROM schema_migrations ORDER BY version")
        return [row[0] for row in await cur.fetchall()]


async def test_migrations_apply_once_and_rerun_is_a_no_op(fresh_db: str) -> None:
    async with await psycopg.AsyncConnection.connect(fresh_db) as conn:
        first = await migrate(conn)
        second = await migrate(conn)
    assert first == [m.label for m in discover()]
    assert second == []
    assert await applied(fresh_db) == [m.version for m in discover()]


def test_migrations_are_package_data_and_none_found_is_an_error_not_an_empty_schema(tmp_path: Path) -> None:
    from voicegate.internal.db.migrator import MIGRATIONS

    assert [m.label for m in discover()][:2] == ["0001_init", "0002_memories"]
    assert str(MIGRATIONS).endswith("voicegate/migrations")  # the top-level migrations/, as package data
    with pytest.raises(MigrationError, match=r"no migrations in .*incomplete"):
        discover(tmp_path)  # what an install without its SQL used to do silently: apply nothing


async def test_an_unknown_applied_migration_is_refused(fresh_db: str) -> None:
    async with await psycopg.AsyncConnection.connect(fresh_db) as conn:
        await migrate(conn)
        await conn.execute("INSERT INTO schema_migrations (version, name, checksum) VALUES (9999, 'future', 'x')")
        await conn.commit()
        with pytest.raises(MigrationError, match="9999_future"):
            await migrate(conn)


async def test_a_failing_migration_leaves_nothing_behind(fresh_db: str) -> None:
    broken = [*discover(), Migration(9000, "broken", "CREATE TABLE half_done (id int); SELECT no_such_function();")]
    async with await psycopg.AsyncConnection.connect(fresh_db) as conn:
        with pytest.raises(psycopg.Error):
            await migrate(conn, broken)
        await conn.rollback()
        cur = await conn.execute("SELECT to_regclass('half_done') IS NULL")
        row = await cur.fetchone()
        assert row is not None and row[0] is True
    assert 9000 not in await applied(fresh_db) if await _has_ledger(fresh_db) else True


async def _has_ledger(uri: str) -> bool:
    async with await psycopg.AsyncConnection.connect(uri) as conn:
        cur = await conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL")
        row = await cur.fetchone()
        return bool(row and row[0])


async def test_pgvector_works_after_migration(fresh_db: str) -> None:
    import numpy as np

    async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as conn:
        await migrate(conn)
        await register_vector_async(conn)
        await conn.execute("CREATE TABLE items (id int, embedding vector(3))")
        await conn.execute("INSERT INTO items VALUES (1, '[1,0,0]'), (2, '[0,1,0]')")
        cur = await conn.execute(
            "SELECT id FROM items ORDER BY embedding <=> %s LIMIT 1", (np.array([0.9, 0.1, 0.0]),)
        )
        assert await cur.fetchone() == (1,)


async def test_database_opens_with_a_connection_string_and_reports_health(fresh_db: str, tmp_path: Path) -> None:
    database = Database(PgvectorConfig(connection_string=fresh_db), tmp_path)
    await database.open()
    try:
        assert not database.embedded
        assert (await database.health())["ok"] is True
    finally:
        await database.close()
    assert (await database.health())["ok"] is False


async def test_a_fast_health_poller_costs_the_database_one_probe_a_second(
        fresh_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/health is public: 200 requests at once, then 100 in a tight loop, take one connection from the
    pool to probe (SELECT 1), not one each."""
    database = Database(PgvectorConfig(connection_string=fresh_db), tmp_path)
    await database.open()
    probes = 0
    connection = database.pool.connection

    def counted(*args: object, **kwargs: object) -> object:
        nonlocal probes
        probes += 1
        return connection(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(database.pool, "connection", counted)
    try:
        reports = await asyncio.gather(*(database.health() for _ in range(200)))
        for _ in range(100):
            reports.append(await database.health())
        assert all(report["ok"] for report in reports)
        assert probes <= 2, f"{probes} probes for 300 health checks"
    finally:
        await database.close()


def test_migration_files_are_well_named() -> None:
    labels = [m.label for m in discover()]
    assert labels[0] == "0001_init"
    assert labels == sorted(labels)
