"""PostgreSQL access: embedded server for the default set-up, pool, migrations."""

from voicegate.internal.db.database import Database, DatabaseUnavailable
from voicegate.internal.db.embedded import EmbeddedPostgres, EmbeddedPostgresError
from voicegate.internal.db.migrator import MigrationError, discover, migrate

__all__ = [
    "Database",
    "DatabaseUnavailable",
    "EmbeddedPostgres",
    "EmbeddedPostgresError",
    "MigrationError",
    "discover",
    "migrate",
]
