"""Stereo audio files written a second at a time: WAV (PCM16) and Ogg/Opus (through PyAV).

Both run on a writer thread (internal/recording/writers.py), never on the event loop. Each is created
0600 with O_EXCL (a recording is personal data, and one call never overwrites another's file), takes
interleaved-by-us PCM16 chunks, and keeps the file usable if the process dies mid-call: the WAV header's
sizes are rewritten after every chunk, and Ogg pages are complete as they are written.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import BinaryIO, Literal, Protocol

import av
import numpy as np

RecordingFormat = Literal["wav", "opus"]
SUFFIXES: dict[RecordingFormat, str] = {"wav": ".wav", "opus": ".ogg"}
MEDIA_TYPES = {".wav": "audio/wav", ".ogg": "audio/ogg"}
CHANNELS = 2
SAMPLE_BYTES = 2
WAV_HEADER_BYTES = 44
OPUS_BITRATE = 32_000  # two voice channels: well above what speech at telephone or wideband rates needs
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)


def interleave(left: bytes, right: bytes) -> bytes:
    """Two mono PCM16 channels of equal length as one stereo stream (left, right, left, ...)."""
    pair = np.empty((len(left) // SAMPLE_BYTES, CHANNELS), dtype="<i2")
    pair[:, 0] = np.frombuffer(left, dtype="<i2")
    pair[:, 1] = np.frombuffer(right, dtype="<i2")
    return pair.tobytes()


def create_private(path: Path) -> BinaryIO:
    """A new file only its owner can read (0600), never an existing one."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    return os.fdopen(descriptor, "wb")


class StereoFile(Protocol):
    def write(self, left: bytes, right: bytes) -> None: ...

    def close(self) -> None: ...

    @property
    def size(self) -> int:
        """Bytes on disk so far."""

    @property
    def unlinked(self) -> bool:
        """The file was deleted under us (an erasure): whatever is written now goes nowhere."""


def _wav_header(rate: int, data_bytes: int) -> bytes:
    block = CHANNELS * SAMPLE_BYTES
    return (b"RIFF" + struct.pack("<I", 36 + data_bytes) + b"WAVE"
            + b"fmt " + struct.pack("<IHHIIHH", 16, 1, CHANNELS, rate, rate * block, block, 8 * SAMPLE_BYTES)
            + b"data" + struct.pack("<I", data_bytes))


class WavFile:
    def __init__(self, path: Path, rate: int) -> None:
        self._out = create_private(path)
        self._rate = rate
        self._data = 0
        self._out.write(_wav_header(rate, 0))

    def write(self, left: bytes, right: bytes) -> None:
        self._out.write(interleave(left, right))
        self._data += len(left) * CHANNELS
        # The sizes in the header follow the data, so a file cut short by a crash still plays to its end.
        end = self._out.tell()
        self._out.seek(0)
        self._out.write(_wav_header(self._rate, self._data))
        self._out.seek(end)
        self._out.flush()

    @property
    def size(self) -> int:
        return WAV_HEADER_BYTES + self._data

    @property
    def unlinked(self) -> bool:
        return os.fstat(self._out.fileno()).st_nlink == 0

    def close(self) -> None:
        self._out.close()


class OpusFile:
    def __init__(self, path: Path, rate: int) -> None:
        if rate not in OPUS_RATES:
            raise ValueError(f"Opus cannot encode {rate} Hz (it takes {', '.join(map(str, OPUS_RATES))})")
        self._out = create_private(path)
        self._container = av.open(self._out, "w", format="ogg")
        self._stream = self._container.add_stream("libopus", rate=rate, layout="stereo")
        self._stream.bit_rate = OPUS_BITRATE
        self._rate = rate
        self._pts = 0
        self._closed = False
        self._final_size = 0

    def write(self, left: bytes, right: bytes) -> None:
        samples = len(left) // SAMPLE_BYTES
        frame = av.AudioFrame.from_ndarray(np.frombuffer(interleave(left, right), dtype="<i2").reshape(1, -1),
                                           format="s16", layout="stereo")
        frame.sample_rate = self._rate
        frame.pts = self._pts
        self._pts += samples
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        self._out.flush()

    @property
    def size(self) -> int:
        return self._final_size if self._closed else self._out.tell()

    @property
    def unlinked(self) -> bool:
        return os.fstat(self._out.fileno()).st_nlink == 0

    def close(self) -> None:
        if self._closed:
            return
        try:
            for packet in self._stream.encode(None):  # what the encoder still holds
                self._container.mux(packet)
            self._container.close()
            self._final_size = self._out.tell()
        finally:
            self._closed = True
            self._out.close()


def open_stereo(path: Path, kind: RecordingFormat, rate: int) -> StereoFile:
    return WavFile(path, rate) if kind == "wav" else OpusFile(path, rate)
