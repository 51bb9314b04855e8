"""The SQL migrations, `NNNN_name.sql`, applied in order by voicegate.internal.db.migrator.

A package only so the files travel in the wheel as package data (`voicegate.migrations`) and are found
with importlib.resources wherever voicegate is installed. A new migration is a new file here.
"""

from voicegate._import_name import require_name

require_name(__name__, "voicegate.migrations")
