"""HTTP signalling for browser calls: its problem documents, rate limits and token minting.

The WHIP endpoint and session resume, which build or find a call's session, are internal/webrtc/.
"""

from voicegate.internal.signaling.problems import SignalingError
from voicegate.internal.signaling.tokens import TokenEndpoint

__all__ = ["SignalingError", "TokenEndpoint"]
