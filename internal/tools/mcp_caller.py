"""Who is asking, told to an MCP server: which callers may use its tools, and what it learns of them.

A tool server's allow-list limits *which* tools reach the model, not *for whom*: an anonymous browser
session offered `orders__lookup_order` could ask for anyone's order. So each `[[mcp.servers]]` entry says
which callers its tools are offered to (`require_identity`, by default verified callers only), and every
call carries the verified caller in the request's `_meta` under CALLER_META (and, for a server over HTTP,
in the CALLER_HEADERS too) so the server can authorise the call itself:

    "_meta": {"voicegate/caller": {"kind": "sip", "id": "3f9a...", "id_format": "opaque"}}

`id` is opaque by default: an HMAC of the caller's memory owner key (internal/memory/owner.py) under the
server's name, stable across calls and restarts (as long as the owner-key secret is kept), different for
every tool server (two servers cannot match their callers up), and revealing neither the phone number
nor the owner key. `caller_id = "raw"` sends the verified value itself (the E.164 number, the JWT
subject), for a server that looks customers up by it; `"none"` sends the kind only.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import Any

from voicegate.internal.config.mcp import McpServerConfig
from voicegate.internal.identity import CallerIdentity

CALLER_META = "voicegate/caller"
CALLER_KIND_HEADER = "X-Voicegate-Caller-Kind"
CALLER_ID_HEADER = "X-Voicegate-Caller-Id"
CALLER_HEADERS = (CALLER_KIND_HEADER, CALLER_ID_HEADER)
_OPAQUE_LABEL = b"voicegate mcp caller v1:"

OwnerKeyOf = Callable[[CallerIdentity], str | None]


def admits(server: McpServerConfig, identity: CallerIdentity | None) -> bool:
    """May this caller be offered the server's tools? "none" admits everyone; "verified" any verified
    caller; a kind ("jwt", "sip", "trusted_header") only callers verified that way."""
    wanted = server.require_identity
    if wanted == "none":
        return True
    if identity is None or identity.is_anonymous:
        return False
    return wanted == "verified" or identity.kind == wanted


def opaque_id(owner_key: str, server: str) -> str:
    return hmac.new(owner_key.encode(), _OPAQUE_LABEL + server.encode(), hashlib.sha256).hexdigest()[:32]


def caller_meta(server: McpServerConfig, identity: CallerIdentity | None, owner_key: OwnerKeyOf | None
                ) -> dict[str, Any]:
    """What the server is told of the caller (the value under CALLER_META)."""
    if identity is None or identity.is_anonymous:
        return {"kind": "anonymous"}
    meta: dict[str, Any] = {"kind": identity.kind}
    if server.caller_id == "raw":
        meta.update(id=identity.value, id_format="raw")
    elif server.caller_id == "opaque":
        owner = owner_key(identity) if owner_key is not None else None
        if owner:
            meta.update(id=opaque_id(owner, server.name), id_format="opaque")
    return meta


def caller_headers(body: Any) -> dict[str, str]:
    """The headers a JSON-RPC `tools/call` body asks for: its CALLER_META, for a server that reads
    headers rather than `_meta` (an API gateway in front of it)."""
    if not isinstance(body, dict) or body.get("method") != "tools/call":
        return {}
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    caller = meta.get(CALLER_META) if isinstance(meta, dict) else None
    if not isinstance(caller, dict):
        return {}
    headers = {CALLER_KIND_HEADER: str(caller.get("kind", ""))}
    if caller.get("id"):
        headers[CALLER_ID_HEADER] = str(caller["id"])
    return headers
