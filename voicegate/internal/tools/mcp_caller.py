"""Who is asking, told to an MCP server: which callers may use its tools, and what it learns of them.

A tool server's allow-list limits *which* tools reach the model, not *for whom*: an anonymous browser
session offered `orders__lookup_order` could ask for anyone's order. So each `[[mcp.servers]]` entry says
which callers its tools are offered to (`require_identity`, by default verified callers only), and every
call carries the verified caller in the request's `_meta` under CALLER_META (and, for a server over HTTP,
in the CALLER_HEADERS too) so the server can authorise the call itself:

    "_meta": {"voicegate/caller": {"kind": "sip", "id": "3f9a...", "id_format": "opaque"}}

`id` is opaque by default (CallerIds): stable across calls, restarts and the nodes that share the
owner-key secret, different for every tool server (two servers cannot match their callers up), and
revealing neither the phone number nor anything else stored of the caller. `caller_id = "raw"` sends the
verified value itself (the E.164 number, the JWT subject), for a server that looks customers up by it;
`"none"` sends the kind only.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from voicegate.internal.config.mcp import McpServerConfig
from voicegate.internal.identity import CallerIdentity

CALLER_META = "voicegate/caller"
CALLER_KIND_HEADER = "X-Voicegate-Caller-Kind"
CALLER_ID_HEADER = "X-Voicegate-Caller-Id"
CALLER_HEADERS = (CALLER_KIND_HEADER, CALLER_ID_HEADER)
# The opaque ids' key is the owner-key secret's HMAC of this label: a key of their own, derived from the
# secret and nothing that is stored. Changing the label changes every id every tool server has seen.
_CALLER_ID_KEY_LABEL = b"voicegate mcp caller id v1"


def admits(server: McpServerConfig, identity: CallerIdentity | None) -> bool:
    """May this caller be offered the server's tools? "none" admits everyone; "verified" any verified
    caller; a kind ("jwt", "sip", "trusted_header") only callers verified that way."""
    wanted = server.require_identity
    if wanted == "none":
        return True
    if identity is None or identity.is_anonymous:
        return False
    return wanted == "verified" or identity.kind == wanted


class CallerIds:
    """The opaque ids: HMAC-SHA256 of `<server>:<kind>:<value>` under a key derived from the owner-key secret
    (memory.owner_key_secret, else data_dir/owner-key.secret) with a label of its own, 32 hex digits.

    Not from the caller's owner key, though that is an HMAC of the same identity under the same secret:
    the owner key is stored in clear (memory tables, recording sidecars, subject-access exports), so an id
    made from it could be computed by anyone holding an export, and matched against what every tool
    server logs. The derived key is never stored anywhere; nodes that share the secret make the same ids.
    Server names cannot hold ':' (config/mcp.py SERVER_NAME), so no two (server, caller) pairs share a message.
    """

    def __init__(self, secret: bytes) -> None:
        if not secret:
            raise ValueError("the owner-key secret is empty")
        self._key = hmac.new(secret, _CALLER_ID_KEY_LABEL, hashlib.sha256).digest()

    def opaque_id(self, identity: CallerIdentity, server: str) -> str | None:
        """The caller's id as `server` sees it; None for an anonymous caller."""
        resource_id = identity.resource_id
        if resource_id is None:
            return None
        return hmac.new(self._key, f"{server}:{resource_id}".encode(), hashlib.sha256).hexdigest()[:32]


def caller_meta(server: McpServerConfig, identity: CallerIdentity | None, caller_ids: CallerIds | None
                ) -> dict[str, Any]:
    """What the server is told of the caller (the value under CALLER_META): the same for every call on
    the caller's behalf, the one that starts work and those that ask after it alike."""
    if identity is None or identity.is_anonymous:
        return {"kind": "anonymous"}
    meta: dict[str, Any] = {"kind": identity.kind}
    if server.caller_id == "raw":
        meta.update(id=identity.value, id_format="raw")
    elif server.caller_id == "opaque":
        opaque = caller_ids.opaque_id(identity, server.name) if caller_ids is not None else None
        if opaque:
            meta.update(id=opaque, id_format="opaque")
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
