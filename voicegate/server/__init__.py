"""voicegate's composition root: the application factory and the `voicegate` command.

`create_gateway_application` loads on first use, so `voicegate --help` does not import the server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from voicegate._import_name import require_name

require_name(__name__, "voicegate.server")

if TYPE_CHECKING:
    from voicegate.server.app import create_gateway_application

__all__ = ["create_gateway_application"]


def __getattr__(name: str) -> Any:
    if name == "create_gateway_application":
        from voicegate.server.app import create_gateway_application

        return create_gateway_application
    raise AttributeError(f"module 'voicegate.server' has no attribute {name!r}")
