"""One call's stereo recording: caller left, agent right, both on the call's clock.

The clock is the transport's 20 ms tick, the moment the pipeline is asked for the agent's next frame
(`said`: every tick, None when the agent is quiet, so silence is written then). The caller's frame of
that tick (`heard`: what the pipeline heard, after the jitter buffer) lands at the same index. A SIP call
hands both in the same tick, caller first; a tick with no caller audio (before the first packet, or a
gap the transport did not fill) is silence on the left. A barge-in clears the playout, so the right
channel falls silent from the very tick the agent stopped. A browser's audio arrives in small bursts:
caller frames may run up to MAX_LEAD ticks ahead of the clock; beyond that (a sender whose clock is
faster than ours) the newest frame is dropped, so the channels never drift apart.

Memory is bounded: one second per channel is gathered on the event loop, then handed to a writer thread
(internal/recording/writers.py); a call of any length holds at most CHUNK_FRAMES + MAX_LEAD frames here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from voicegate.internal.recording.formats import SUFFIXES, RecordingFormat, StereoFile, open_stereo
from voicegate.internal.recording.store import RecordingInfo, RecordingStore, iso
from voicegate.internal.recording.writers import RecordingWriters

log = logging.getLogger(__name__)

FRAME_MS = 20
CHUNK_FRAMES = 50  # one second per hand-over to the writer thread
MAX_LEAD = 10  # caller frames allowed ahead of the clock (200 ms of a browser's bursts)

Finished = Callable[[RecordingInfo], None]


class _FileSide:
    """What the writer thread holds of a recording: the open file and the sidecar to update."""

    def __init__(self, store: RecordingStore, info: RecordingInfo, kind: RecordingFormat) -> None:
        self.store = store
        self.info = info
        self.kind = kind
        self.file: StereoFile | None = None
        self.erased = False  # the audio was deleted under us (an erasure): write nothing more, anywhere
        self.failed = False

    def open(self) -> None:
        try:
            self.store.ensure()
            self.file = open_stereo(self.store.audio_path(self.info), self.kind, self.info.sample_rate)
            self.store.write(self.info)
        except FileExistsError:  # never another recording's file (O_EXCL): leave it be
            log.error("recording could not start: its file already exists", extra={"session_id": self.info.session_id})
            self.failed = True
        except Exception as exc:  # a full or read-only disk: the call goes on unrecorded
            log.error("recording could not start: %s", type(exc).__name__, extra={"session_id": self.info.session_id})
            self.failed = True
            self._drop_file()

    def write(self, left: bytes, right: bytes) -> None:
        if self.file is None or self.erased or self.failed:
            return
        try:
            if self.file.unlinked:
                self._erased()
                return
            self.file.write(left, right)
        except Exception as exc:
            log.error("recording write failed; the rest of the call is not recorded: %s", type(exc).__name__,
                      extra={"session_id": self.info.session_id})
            self.failed = True

    def finish(self, info: RecordingInfo, keep: bool, finished: Finished | None) -> None:
        file = self.file
        if file is None:
            return
        self.file = None
        try:
            if file.unlinked:
                self.erased = True
        except OSError:
            pass
        try:
            file.close()
        except Exception as exc:
            log.error("recording could not be closed cleanly: %s", type(exc).__name__,
                      extra={"session_id": info.session_id})
        if self.erased or not keep:
            self._drop_file()
            return
        info.bytes = file.size
        self.store.write(info)
        if not self.store.audio_path(info).exists():  # erased between our check and the sidecar's rewrite
            self._drop_file()
            return
        if finished is not None:
            finished(info)

    def _erased(self) -> None:
        self.erased = True
        if self.file is not None:
            try:
                self.file.close()
            finally:
                self.file = None
        self._drop_file()

    def _drop_file(self) -> None:
        self.store.delete(self.info)


class CallRecorder:
    """Lives on the event loop; `heard` and `said` are the hot path (a list append, one join a second)."""

    def __init__(self, store: RecordingStore, writers: RecordingWriters, info: RecordingInfo,
                 kind: RecordingFormat, *, finished: Finished | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.info = info
        self._writers = writers
        self._lane = writers.lane()
        self._frame = info.sample_rate * FRAME_MS // 1000 * 2
        self._silence = bytes(self._frame)
        self._left: list[bytes] = []
        self._right: list[bytes] = []
        self._frames = 0
        self._gap_frames = 0
        self.dropped_lead = 0
        self._clock = clock
        self._finished = finished
        self._side = _FileSide(store, info, kind)
        self.open = True
        writers.control(self._lane, self._side.open)

    @staticmethod
    def file_name(session_id: str, kind: RecordingFormat) -> str:
        return f"{session_id}{SUFFIXES[kind]}"

    def heard(self, pcm: bytes) -> None:
        if not self.open or len(pcm) != self._frame:
            return
        behind = len(self._right) - len(self._left)
        if behind > 0:
            self._left.extend([self._silence] * behind)  # ticks with no caller audio
        elif -behind >= MAX_LEAD:
            self.dropped_lead += 1
            return
        self._left.append(pcm)

    def said(self, pcm: bytes | None) -> None:
        if not self.open:
            return
        self._right.append(pcm if pcm is not None and len(pcm) == self._frame else self._silence)
        if len(self._right) >= CHUNK_FRAMES:
            self._flush(CHUNK_FRAMES)

    def _flush(self, frames: int) -> None:
        if frames <= 0:
            return
        left = self._left[:frames]
        if len(left) < frames:
            left += [self._silence] * (frames - len(left))
        right = self._right[:frames]
        del self._left[:frames], self._right[:frames]
        self._frames += frames
        left_pcm, right_pcm = b"".join(left), b"".join(right)
        side = self._side
        if not self._writers.submit(self._lane, lambda: side.write(left_pcm, right_pcm), 2 * len(left_pcm)):
            # The writers are behind: this second becomes silence, written by a job with nothing in it.
            self._gap_frames += frames
            size = len(left_pcm)
            self._writers.control(self._lane, lambda: side.write(bytes(size), bytes(size)))

    @property
    def seconds(self) -> float:
        return (self._frames + len(self._right)) * FRAME_MS / 1000.0

    def finish(self, consent: str, keep: bool = True) -> None:
        """The call ended (`keep`) or the caller opted out (not `keep`: the file and sidecar go)."""
        if not self.open:
            return
        if keep:
            self._flush(len(self._right))
        self.open = False
        self._left.clear()
        self._right.clear()
        info = RecordingInfo(**self.info.as_json())
        info.consent = consent
        info.ended_at = iso(self._clock())
        info.duration_s = round(self._frames * FRAME_MS / 1000.0, 3)
        info.gaps_s = round(self._gap_frames * FRAME_MS / 1000.0, 3)
        side, finished = self._side, self._finished
        self._writers.control(self._lane, lambda: side.finish(info, keep, finished))


def new_info(session_id: str, kind: RecordingFormat, rate: int, **fields: object) -> RecordingInfo:
    return RecordingInfo(session_id=session_id, file=Path(CallRecorder.file_name(session_id, kind)).name,
                         format=kind, sample_rate=rate, started_at=iso(time.time()), **fields)  # type: ignore[arg-type]
