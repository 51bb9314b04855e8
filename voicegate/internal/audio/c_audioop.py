"""The stdlib's C `audioop`, where it is there and reads our PCM16.

It is deprecated in Python 3.11 and gone in 3.13; callers keep a numpy path for when it is absent. It
works in native byte order, and our PCM16 is little-endian, so a big-endian host gets None too.
"""

from __future__ import annotations

import sys
import warnings
from types import ModuleType


def load_audioop() -> ModuleType | None:
    if sys.byteorder != "little":
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import audioop
    except ImportError:
        return None
    return audioop
