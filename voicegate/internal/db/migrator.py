"""Apply the SQL files of the top-level migrations/ folder (`NNNN_name.sql`, imported as the
`voicegate.migrations` package) in order, each inside a transaction, recorded in schema_migrations.

The files are package data, read with importlib.resources, so an installed wheel finds them wherever it
is installed: the SQL ships with the code that expects its tables (docs/packaging.md). A database that
has a migration this code does not know was written by a newer voicegate; running against it could
corrupt data, so the runner refuses. Finding no files at all means a broken install, never "nothing to
do": a server without its tables would only fail later, on a caller's first memory write.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable

import psycopg

log = logging.getLogger(__name__)

MIGRATIONS: Traversable = files("voicegate.migrations")
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# Any constant works; it only has to be the same for every voicegate process sharing a database.
_ADVISORY_LOCK_KEY = 0x766F6963


class MigrationError(Exception):
    pass


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"


def discover(directory: Traversable = MIGRATIONS) -> list[Migration]:
    found: list[Migration] = []
    for entry in sorted((e for e in directory.iterdir() if e.name.endswith(".sql")), key=lambda e: e.name):
        match = _NAME.match(entry.name)
        if not match:
            raise MigrationError(f"{directory}/{entry.name}: migration files are named NNNN_lowercase_name.sql")
        found.append(Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    if not found:
        raise MigrationError(f"no migrations in {directory}: this voicegate installation is incomplete "
                             "(reinstall it: pip install --force-reinstall voicegate)")
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"{directory}: two migrations share a version number")
    return found


_BOOTSTRAP = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


async def migrate(conn: psycopg.AsyncConnection, migrations: list[Migration] | None = None) -> list[str]:
    """Bring the database up to date; return the labels of the migrations applied now."""
    known = discover() if migrations is None else migrations
    by_version = {m.version: m for m in known}
    applied_now: list[str] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_ADVISORY_LOCK_KEY,))
        await conn.execute(_BOOTSTRAP)
        cursor = await conn.execute("SELECT version, name, checksum FROM schema_migrations ORDER BY version")
        applied = {row[0]: (row[1], row[2]) for row in await cursor.fetchall()}
        unknown = sorted(set(applied) - set(by_version))
        if unknown:
            labels = ", ".join(f"{v:04d}_{applied[v][0]}" for v in unknown)
            raise MigrationError(
                f"the database has migrations this voicegate does not know ({labels}); "
                "it was migrated by a newer version. Upgrade voicegate or restore a matching backup."
            )
        for migration in known:
            if migration.version in applied:
                if applied[migration.version][1] != migration.checksum:
                    log.warning("applied migration differs from its file", extra={"migration": migration.label})
                continue
            async with conn.transaction():
                await conn.execute(migration.sql.encode())
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, migration.checksum),
                )
            log.info("applied migration", extra={"migration": migration.label})
            applied_now.append(migration.label)
    return applied_now
