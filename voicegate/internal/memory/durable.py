"""Files that are replaced whole or not at all: what the Markdown provider and the hang-up outbox write."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, data: str) -> None:
    """Write `data` to a temporary file beside `path` (mode 0600), fsync it, rename it over `path`:
    a crash leaves the old file or the new one, never half of either."""
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
