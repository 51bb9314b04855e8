"""Caller identity: the verified `CallerIdentity`, JWTs, SIP caller numbers, trusted headers."""

from voicegate.internal.identity.caller import CallerIdentity, IdentityKind

__all__ = ["CallerIdentity", "IdentityKind"]
