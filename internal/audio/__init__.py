"""Audio: frames, resampling, G.711, RTP, jitter buffer, DTMF."""

from internal.audio.frame import FRAME_MS, AudioFrame, frame_bytes

__all__ = ["FRAME_MS", "AudioFrame", "frame_bytes"]
