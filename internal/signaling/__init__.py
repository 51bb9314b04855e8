"""HTTP signalling for browser calls: WHIP (RFC 9725) with session resume, rate limits, token minting."""

from internal.signaling.problems import SignalingError
from internal.signaling.resume import ResumeTokens
from internal.signaling.tokens import TokenEndpoint
from internal.signaling.whip import WhipEndpoint

__all__ = ["ResumeTokens", "SignalingError", "TokenEndpoint", "WhipEndpoint"]
