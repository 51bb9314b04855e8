"""A bring-your-own agent's access to the memory of the caller it is talking to.

GET/PATCH /api/memory name their owner by a verified JWT or the trusted server-side header, so a BYO
backend could not edit the memory of a phone caller (`sip:+E164`) it was answering. Instead, each call
of a verified caller gets a capability: a random token sent to the agent in every turn's request
(`memory_access`), which GET/PATCH /api/memory accept in `X-Voicegate-Call-Token`. It names nothing:

- it is bound to that call and its verified caller; there is no way to name another caller with it;
- it is valid only while the call lives (revoked when the session ends) and only on the node that
  hosts the call (it is kept in that process, never stored);
- its writes are the call's own: they carry the call's session id and erasure epoch (an erasure of the
  caller during the call refuses them, like the call's tool writes) and reach the call's hang-up writers
  like any other edit; anonymous calls get none.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

CALL_TOKEN_HEADER = "X-Voicegate-Call-Token"


@dataclass(frozen=True, slots=True)
class CallGrant:
    session_id: str
    owner: str
    epoch: int


class CallMemoryAccess:
    """The live calls' tokens, in this process only."""

    def __init__(self) -> None:
        self._grants: dict[str, CallGrant] = {}
        self._tokens: dict[str, str] = {}  # session id -> its token

    def issue(self, session_id: str, owner: str, epoch: int) -> str:
        self.revoke(session_id)
        token = secrets.token_urlsafe(32)
        self._grants[token] = CallGrant(session_id, owner, epoch)
        self._tokens[session_id] = token
        return token

    def token_for(self, session_id: str) -> str | None:
        return self._tokens.get(session_id)

    def grant(self, token: str) -> CallGrant | None:
        """What `token` allows (None: unknown, or its call has ended)."""
        return self._grants.get(token) if token else None

    def revoke(self, session_id: str) -> None:
        token = self._tokens.pop(session_id, None)
        if token is not None:
            self._grants.pop(token, None)

    def __len__(self) -> int:
        return len(self._grants)


def access_field(access: CallMemoryAccess, session_id: str, public_url: str = "") -> dict[str, str] | None:
    """The agent request's `memory_access` for a call: the token, the header to send it in, and the
    memory URL of this node when `server.public_url` says where it is; None for a call without one."""
    token = access.token_for(session_id)
    if token is None:
        return None
    field = {"token": token, "header": CALL_TOKEN_HEADER}
    if public_url:
        field["url"] = public_url.rstrip("/") + "/api/memory"
    return field
