"""The unit of audio everywhere in voicegate: 20 ms of 16-bit signed little-endian mono PCM."""

from __future__ import annotations

from dataclasses import dataclass

FRAME_MS = 20
BYTES_PER_SAMPLE = 2


def frame_bytes(sample_rate: int) -> int:
    """Bytes in one 20 ms PCM16 mono frame at `sample_rate` (640 at 16 kHz, 320 at 8 kHz)."""
    return sample_rate * FRAME_MS // 1000 * BYTES_PER_SAMPLE


@dataclass(frozen=True, slots=True)
class AudioFrame:
    pcm: bytes
    sample_rate: int

    @property
    def samples(self) -> int:
        return len(self.pcm) // BYTES_PER_SAMPLE

    @property
    def duration_ms(self) -> float:
        return 1000.0 * self.samples / self.sample_rate

    @staticmethod
    def silence(sample_rate: int) -> AudioFrame:
        return AudioFrame(bytes(frame_bytes(sample_rate)), sample_rate)
