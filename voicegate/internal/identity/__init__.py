"""Caller identity: the verified `CallerIdentity`, JWTs, trusted headers (a SIP caller's number is read
beside SIP, internal/sip/caller.py)."""

from voicegate.internal.identity.caller import CallerIdentity, IdentityKind

__all__ = ["CallerIdentity", "IdentityKind"]
