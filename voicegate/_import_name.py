"""One import name per module: voicegate's code is `voicegate.*` and nothing else.

The checkout keeps `internal/`, `server/` and `migrations/` at its root as links into the package, for
readers of the design (docs/architecture.md). Imported through them (`import internal.sip`), a module would
load a second time under another name, with its own copy of every registry, cache and lock; so the three
packages refuse such a name at once, with the name to use instead.
"""

from __future__ import annotations


def require_name(actual: str, expected: str) -> None:
    """Raise ImportError unless the package importing this runs as `expected`."""
    if actual != expected:
        raise ImportError(
            f"voicegate's {expected.removeprefix('voicegate.')}/ was imported as {actual!r}: import it as "
            f"{expected!r} (the links at the checkout's root are for reading, not importing)")
