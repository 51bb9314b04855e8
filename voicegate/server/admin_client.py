"""The CLI's side of the server's admin routes (server/routes_admin.py), for what only the running server
holds: the memory of `memory.provider = "memory"`, which lives in the `voicegate serve` process.

The server is found the way its start-up banner shows it (`server.host`, `server.port`; a wildcard host
is this machine) and asked with `server.api_key`, read from the same config. Never a silent fallback:
without the key, or without an answer, the operator is told which route could not be used and why.
"""

from __future__ import annotations

from urllib.parse import quote

import httpx

from voicegate.internal.config import Config
from voicegate.server.banner import page_urls
from voicegate.server.routes_admin import ADMIN_MEMORY, Erasure

# An erasure waits for the owner's lock, so for a write in progress (a hang-up digest, reconciliation).
ADMIN_TIMEOUT_S = 60.0


class AdminRefused(Exception):
    """The server could not be asked, or refused; the message says what to do."""


def server_url(config: Config) -> str:
    return page_urls(config, config.server.port, None)[0].rstrip("/")


class AdminClient:
    def __init__(self, config: Config) -> None:
        if not config.server.api_key:
            raise AdminRefused(
                f'memory.provider = "memory" keeps memory inside the running server, and deleting it goes through '
                f"{ADMIN_MEMORY.name}, which needs server.api_key: set it (or VOICEGATE_SERVER__API_KEY) for "
                "the server and for this command")
        self.url = server_url(config)
        self._headers = {"X-API-Key": config.server.api_key}

    async def delete_memory(self, caller: str, kind: str | None = None) -> Erasure:
        """Erase `caller` (`sip:+E164`, `jwt:NAME`, ..., or an owner key with kind "owner_key") on the server."""
        path = f"/api/admin/memory/{quote(caller, safe=':+@')}"
        try:
            async with httpx.AsyncClient(base_url=self.url, timeout=ADMIN_TIMEOUT_S) as client:
                response = await client.delete(path, params={"kind": kind} if kind else None, headers=self._headers)
        except httpx.HTTPError as exc:
            raise AdminRefused(f"cannot reach the server at {self.url} for {ADMIN_MEMORY.name} "
                               f"({exc or type(exc).__name__}); is `voicegate serve` running with this "
                               "config?") from None
        try:
            body = response.json()
            if response.status_code == 200:
                return Erasure.model_validate(body)
            message = str(body["error"]["message"])
        except (ValueError, KeyError, TypeError):
            message = response.text[:200]
        raise AdminRefused(f"the server at {self.url} refused {ADMIN_MEMORY.name}: "
                           f"{response.status_code} {message}")
