"""WebRTC media for browser callers: aiortc peer connections, their audio tracks and DataChannel."""

from voicegate.internal.peer.call import WebRtcCall, attached_call
from voicegate.internal.peer.connection import OfferError, PeerConnection, PeerRegistry
from voicegate.internal.peer.ice import configure_ice_hosts, rtc_configuration

__all__ = [
    "OfferError",
    "PeerConnection",
    "PeerRegistry",
    "WebRtcCall",
    "attached_call",
    "configure_ice_hosts",
    "rtc_configuration",
]
