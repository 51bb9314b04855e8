"""Who hears that an owner's memory changed, in this process: live calls and control-plane sockets.

Listeners are called synchronously with no argument and no content; one that raises is logged and the
others still hear. An owner's entry goes when its last listener unsubscribes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

Listener = Callable[[], None]


class OwnerListeners:
    def __init__(self) -> None:
        self._listeners: dict[str, list[Listener]] = {}

    def subscribe(self, owner: str, listener: Listener) -> Callable[[], None]:
        self._listeners.setdefault(owner, []).append(listener)

        def unsubscribe() -> None:
            listeners = self._listeners.get(owner)
            if listeners and listener in listeners:
                listeners.remove(listener)
                if not listeners:
                    del self._listeners[owner]

        return unsubscribe

    def has(self, owner: str) -> bool:
        return bool(self._listeners.get(owner))

    def owners(self) -> list[str]:
        return list(self._listeners)

    def tell(self, owner: str) -> None:
        for listener in list(self._listeners.get(owner, [])):
            try:
                listener()
            except Exception:
                log.exception("memory change listener failed")
