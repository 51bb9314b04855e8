"""WebRTC media for browser callers: aiortc peer connections, their audio tracks and DataChannel.

A protocol library like internal/sip: what a peer connection is to a call (its session and pipeline) is
internal/webrtc/call.py, in the sessions layer.
"""

from voicegate.internal.peer.connection import OfferError, PeerConnection, PeerRegistry
from voicegate.internal.peer.ice import configure_ice_hosts, rtc_configuration

__all__ = [
    "OfferError",
    "PeerConnection",
    "PeerRegistry",
    "configure_ice_hosts",
    "rtc_configuration",
]
