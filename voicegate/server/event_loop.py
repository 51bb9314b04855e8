"""Which event loop a node runs: asyncio's own, or uvloop (libuv) when it is installed and asked for.

uvloop is optional (`pip install uvloop`; not a dependency): a node asked for it that lacks it says so and runs
asyncio's loop, so the choice never stops a node from starting. Under uvloop, UDP sockets are read by
libuv, which already takes every waiting datagram per wake (internal/peer/datagrams.py is for asyncio's
own transport).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def event_loop_factory(choice: str) -> LoopFactory | None:
    """The factory for `server.event_loop` ("asyncio", "uvloop", "auto"); None: asyncio's default."""
    if choice not in ("uvloop", "auto"):
        return None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        if choice == "uvloop":
            log.warning("server.event_loop is \"uvloop\" but uvloop is not installed (pip install "
                        "uvloop); running asyncio's event loop")
        return None
    factory: LoopFactory = uvloop.new_event_loop
    return factory
