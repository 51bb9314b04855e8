"""PostgreSQL access: embedded server for the default set-up, pool, migrations."""

from internal.db.database import Database, DatabaseUnavailable
from internal.db.embedded import EmbeddedPostgres, EmbeddedPostgresError
from internal.db.migrations import MigrationError, discover, migrate

__all__ = [
    "Database",
    "DatabaseUnavailable",
    "EmbeddedPostgres",
    "EmbeddedPostgresError",
    "MigrationError",
    "discover",
    "migrate",
]
