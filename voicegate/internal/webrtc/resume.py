"""Resume tokens: single-use credentials that reattach a new transport to a live conversation.

A browser whose connection died (network change, laptop lid) redials with `POST /whip?resume=TOKEN`
and keeps its history, transcript and rolling summary, without a second greeting. This is a StreamCore
extension to WHIP, not part of RFC 9725.

- A token is 32 random bytes and is never the session id: the id appears in URLs and logs, and a
  credential that reattaches to someone's conversation must appear in neither.
- Every answer carries a fresh token and retires the previous one, so a token copied from a log or a
  proxy is worthless once the real client has redialled.
- Only a digest of each token is kept, so a memory dump does not hand out live credentials.
- A token presented by a different caller identity than the session's resumes nothing and stays
  valid for its owner: a stolen token must neither work nor let the thief burn the owner's token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from voicegate.internal.identity import CallerIdentity
from voicegate.internal.session import Session

ResumeStatus = Literal["new", "resumed", "expired"]
TOKEN_BYTES = 32


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "replace")).digest()


def same_caller(a: CallerIdentity, b: CallerIdentity) -> bool:
    """The same person as far as we can tell (the reasons recorded for logs may differ)."""
    return (a.kind, a.value) == (b.kind, b.value)


@dataclass(frozen=True, slots=True)
class ResumeOutcome:
    status: ResumeStatus
    session: Session | None = None  # set when status is "resumed"


class ResumeTokens:
    def __init__(self, lookup: Callable[[str], Session | None]) -> None:
        self._lookup = lookup  # session id -> the live session, or None once it has ended
        self._session_by_digest: dict[bytes, str] = {}
        self._digest_by_session: dict[str, bytes] = {}

    def __len__(self) -> int:
        return len(self._session_by_digest)

    def issue(self, session: Session) -> str:
        """A new token for `session`; the session's previous token stops working."""
        self.forget(session.id)
        self._forget_ended()
        token = secrets.token_urlsafe(TOKEN_BYTES)
        digest = _digest(token)
        self._session_by_digest[digest] = session.id
        self._digest_by_session[session.id] = digest
        return token

    def holds(self, session_id: str, token: str | None) -> bool:
        """Whether `token` is the session's current resume token (the proof an anonymous caller has that
        a session is theirs: anyone may be anonymous, only its client has the token)."""
        digest = self._digest_by_session.get(session_id)
        return bool(token) and digest is not None and hmac.compare_digest(digest, _digest(token or ""))

    def redeem(self, token: str | None, caller: CallerIdentity) -> ResumeOutcome:
        """Spend `token` to resume its session, if it is live and belongs to `caller`."""
        if not token:
            return ResumeOutcome("new")
        session_id = self._session_by_digest.get(_digest(token))
        session = self._lookup(session_id) if session_id is not None else None
        if session is None or session.ended:
            if session_id is not None:
                self.forget(session_id)
            return ResumeOutcome("expired")
        if not same_caller(session.identity, caller):
            return ResumeOutcome("expired")
        self.forget(session.id)  # spent now, before any await, so two racing redials cannot both win
        return ResumeOutcome("resumed", session)

    def forget(self, session_id: str) -> None:
        digest = self._digest_by_session.pop(session_id, None)
        if digest is not None:
            self._session_by_digest.pop(digest, None)

    def _forget_ended(self) -> None:
        for session_id in list(self._digest_by_session):
            session = self._lookup(session_id)
            if session is None or session.ended:
                self.forget(session_id)
