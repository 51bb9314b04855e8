"""voicegate: a voice-agent server for SIP and WebRTC callers, with privacy-first memory across calls.

`voicegate` is the only top-level import package the distribution installs. Its parts keep the folders
the design gives them (docs/packaging.md, "One import package"):
- `voicegate.server`: the composition root, the HTTP application and the `voicegate` command;
- `voicegate.internal`: the libraries (SIP, media, speech, turn-taking, memory, ...), no public API;
- `voicegate.migrations`: the SQL migrations, package data;
- `voicegate.memory` and `voicegate.tools`: the public extension API a deployer imports.

`create_gateway_application` is imported on first use, so `import voicegate.memory` or
`python -m voicegate --help` do not load the whole server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from voicegate.server.app import create_gateway_application

__all__ = ["create_gateway_application"]


def __getattr__(name: str) -> Any:
    if name == "create_gateway_application":
        from voicegate.server.app import create_gateway_application

        return create_gateway_application
    raise AttributeError(f"module 'voicegate' has no attribute {name!r}")
