"""PCM16 mono <-> WAV, for engines that speak files (transcription uploads, espeak-ng output).

Reading tolerates the header lies real tools write: espeak-ng `--stdout` cannot seek back to fill in
the lengths, so its RIFF and data sizes are placeholders. The data chunk is therefore taken to run to
the end of the input whenever its declared size is zero or larger than what is there.
"""

from __future__ import annotations

import io
import struct
import wave

import numpy as np

_SAMPLE_WIDTH = 2


def pcm_to_wav(pcm: bytes, rate: int) -> bytes:
    """Wrap PCM16 mono little-endian samples in a canonical 44-byte-header WAV."""
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(_SAMPLE_WIDTH)
        writer.setframerate(rate)
        writer.writeframes(pcm[: len(pcm) - len(pcm) % _SAMPLE_WIDTH])
    return out.getvalue()


def wav_to_pcm(data: bytes) -> tuple[bytes, int]:
    """PCM16 mono samples and their rate from a 16-bit WAV; stereo is mixed down to mono."""
    try:
        with wave.open(io.BytesIO(data), "rb") as reader:
            channels = reader.getnchannels()
            width = reader.getsampwidth()
            rate = reader.getframerate()
    except (wave.Error, EOFError) as exc:
        raise ValueError(f"not a WAV file: {exc}") from exc
    if width != _SAMPLE_WIDTH:
        raise ValueError(f"only 16-bit WAV is supported, got {8 * width}-bit")
    pcm = _data_chunk(data)
    frame = width * channels
    pcm = pcm[: len(pcm) - len(pcm) % frame]
    if channels > 1:
        samples = np.frombuffer(pcm, dtype="<i2").reshape(-1, channels).astype(np.int32)
        pcm = samples.mean(axis=1).round().astype("<i2").tobytes()
    return pcm, rate


def _data_chunk(data: bytes) -> bytes:
    """The bytes of the `data` chunk, walking the RIFF chunks ourselves to survive bogus sizes."""
    pos = 12  # "RIFF" <size> "WAVE"
    while pos + 8 <= len(data):
        chunk_id = data[pos : pos + 4]
        (size,) = struct.unpack_from("<I", data, pos + 4)
        body = pos + 8
        if chunk_id == b"data":
            available = len(data) - body
            return data[body : body + size] if 0 < size <= available else data[body:]
        pos = body + size + (size & 1)  # chunks are padded to even lengths
    raise ValueError("WAV file has no data chunk")
