"""HTTP signalling for browser calls: WHIP (RFC 9725) with session resume, rate limits, token minting."""

from voicegate.internal.signaling.problems import SignalingError
from voicegate.internal.signaling.resume import ResumeTokens
from voicegate.internal.signaling.tokens import TokenEndpoint
from voicegate.internal.signaling.whip import WhipEndpoint

__all__ = ["ResumeTokens", "SignalingError", "TokenEndpoint", "WhipEndpoint"]
