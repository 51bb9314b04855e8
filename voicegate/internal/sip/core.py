"""UaCore: what the call flows (uas.py, uac.py, update.py, session_refresh.py) need from the user agent.

The flows are given the UserAgent itself, but they name it by this Protocol, so they do not import
ua.py (which imports them): the dependency runs one way, ua -> flows -> core.
"""

from __future__ import annotations

from typing import Protocol

from voicegate.internal.config.sections import SipConfig
from voicegate.internal.sip.calls import CallRegistry
from voicegate.internal.sip.digest import DigestAuthenticator
from voicegate.internal.sip.handler import CallHandler
from voicegate.internal.sip.stack import SipStack
from voicegate.internal.token_bucket import TokenBucketLimiter


class UaCore(Protocol):
    # Read-only members: a UserAgent's plain attributes satisfy them.
    @property
    def config(self) -> SipConfig: ...
    @property
    def handler(self) -> CallHandler: ...
    @property
    def stack(self) -> SipStack: ...
    @property
    def calls(self) -> CallRegistry: ...
    @property
    def limiter(self) -> TokenBucketLimiter: ...
    @property
    def authenticator(self) -> DigestAuthenticator | None: ...
    @property
    def shared_numbers(self) -> frozenset[str]: ...
    @property
    def trusted_peers(self) -> list[str]: ...
    def trusted_peers_for(self, transport: str) -> list[str]: ...
