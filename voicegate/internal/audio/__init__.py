"""Audio: frames, resampling, G.711, RTP, jitter buffer, DTMF, RTCP, pacing and the per-call RTP session."""

from voicegate.internal.audio.dtmf import DtmfError, DtmfReceiver, DtmfSender, TelephoneEvent
from voicegate.internal.audio.frame import FRAME_MS, AudioFrame, frame_bytes
from voicegate.internal.audio.g711 import (
    PCMA,
    PCMU,
    G711Codec,
    alaw_decode,
    alaw_encode,
    codec_for_payload_type,
    ulaw_decode,
    ulaw_encode,
)
from voicegate.internal.audio.jitterbuffer import JitterBuffer, PushResult
from voicegate.internal.audio.rtcp import (
    ReceiverReport,
    ReceiverStats,
    ReportBlock,
    RtcpError,
    SenderReport,
    parse_rtcp,
)
from voicegate.internal.audio.rtp import RtpError, RtpPacket, SequenceTracker, seq_newer, ts_newer
from voicegate.internal.audio.rtp_ports import RtpPortAllocator, RtpPortsExhausted
from voicegate.internal.audio.rtp_session import MediaDirection, RtpSession, RtpStats
from voicegate.internal.audio.scheduler import PacedScheduler, PacedStream

__all__ = [
    "FRAME_MS",
    "PCMA",
    "PCMU",
    "AudioFrame",
    "DtmfError",
    "DtmfReceiver",
    "DtmfSender",
    "G711Codec",
    "JitterBuffer",
    "MediaDirection",
    "PacedScheduler",
    "PacedStream",
    "PushResult",
    "ReceiverReport",
    "ReceiverStats",
    "ReportBlock",
    "RtcpError",
    "RtpError",
    "RtpPacket",
    "RtpPortAllocator",
    "RtpPortsExhausted",
    "RtpSession",
    "RtpStats",
    "SenderReport",
    "SequenceTracker",
    "TelephoneEvent",
    "alaw_decode",
    "alaw_encode",
    "codec_for_payload_type",
    "frame_bytes",
    "parse_rtcp",
    "seq_newer",
    "ts_newer",
    "ulaw_decode",
    "ulaw_encode",
]
