"""Sample-rate conversion of PCM16 mono with libswresample (through `av`).

One `Resampler` per stream and direction, reused for every chunk: creating one costs far more than
using it, and a stream's resampler keeps the filter state that makes chunk boundaries inaudible.
"""

from __future__ import annotations

import av
import numpy as np


class Resampler:
    def __init__(self, src_rate: int, dst_rate: int) -> None:
        self.src_rate = src_rate
        self.dst_rate = dst_rate
        self._resampler = (
            av.AudioResampler(format="s16", layout="mono", rate=dst_rate) if src_rate != dst_rate else None
        )
        self._pts = 0

    def process(self, pcm: bytes) -> bytes:
        """Convert one chunk; the output may be a few samples shorter or longer than the exact ratio."""
        if self._resampler is None or not pcm:
            return pcm
        samples = np.frombuffer(pcm, dtype=np.int16)
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = self.src_rate
        frame.pts = self._pts
        self._pts += samples.size
        return b"".join(out.to_ndarray().tobytes() for out in self._resampler.resample(frame))

    def flush(self) -> bytes:
        """The samples still held in the filter, at the end of a stream."""
        if self._resampler is None:
            return b""
        return b"".join(out.to_ndarray().tobytes() for out in self._resampler.resample(None))


def resample(pcm: bytes, src_rate: int, dst_rate: int) -> bytes:
    """Convert a whole buffer at once."""
    resampler = Resampler(src_rate, dst_rate)
    return resampler.process(pcm) + resampler.flush()
