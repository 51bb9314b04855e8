"""Call recording for one server process: the store, the writer threads, the retention sweep, and each
session's `ConsentedRecording`. Built by the composition root when `[recording] enabled = true`.

The caller's identity in a sidecar is their memory owner key (an HMAC of the verified identity, made by
the function the server passes in), never a phone number, so `voicegate memory delete --caller` finds
their recordings and nobody else can tell whose they are. Anonymous callers' recordings carry no key;
only the retention sweep (or DELETE /calls/{id}/recording) removes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from voicegate.internal.config.recording import RecordingConfig
from voicegate.internal.conversation.slots import Slot
from voicegate.internal.conversation.state import LiveCall
from voicegate.internal.event_envelope import EventSink
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.recording.call import ConsentedRecording
from voicegate.internal.recording.consent import ConsentState
from voicegate.internal.recording.recorder import CHUNK_FRAMES, FRAME_MS, CallRecorder, new_info
from voicegate.internal.recording.retention import sweep_forever
from voicegate.internal.recording.store import RECORDINGS_DIR, RecordingInfo, RecordingStore
from voicegate.internal.recording.writers import RecordingWriters

log = logging.getLogger(__name__)

RECORDING_KEY: Slot[ConsentedRecording] = Slot("recording")  # the session's ConsentedRecording
# Writer threads: enough that Opus encoding (~1 % of a core per call, measured in bench/sip/recording.py)
# for a few hundred calls never queues behind one thread, few enough to cost nothing when idle.
MAX_WRITER_THREADS = 4
STEREO_BYTES_PER_SAMPLE = 4
PENDING_RATE = 16000  # the bound on waiting audio is counted in seconds of a wideband call

OwnerKeyOf = Callable[[CallerIdentity], str | None]


class RecordingService:
    def __init__(self, config: RecordingConfig, data_dir: Path, *, owner_key: OwnerKeyOf,
                 call_id_of: Callable[[LiveCall], str] = lambda session: "", telemetry: Any = None) -> None:
        self.config = config
        self.store = RecordingStore(data_dir / RECORDINGS_DIR)
        threads = max(1, min(MAX_WRITER_THREADS, os.cpu_count() or 1))
        self.writers = RecordingWriters(threads, int(config.max_pending_s * PENDING_RATE * STEREO_BYTES_PER_SAMPLE))
        self._owner_key = owner_key
        self._call_id_of = call_id_of
        self._telemetry = telemetry
        self._sweeper: asyncio.Task[None] | None = None
        self.stored = (0, 0)  # (recordings, bytes) on disk, as of the last sweep plus what was kept since
        self.kept = 0

    # ---- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        await asyncio.to_thread(self.store.ensure)
        self._sweeper = asyncio.create_task(sweep_forever(self.sweep, self.config.sweep_interval_s),
                                            name="recording-sweeper")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        await asyncio.to_thread(self.writers.close)  # every call has ended: their files are finished

    # ---- calls ---------------------------------------------------------------------------------------

    def for_pipeline(self, session: LiveCall, sample_rate: int, sink: EventSink) -> ConsentedRecording:
        current = session.slots.get(RECORDING_KEY)
        if current is None:
            current = ConsentedRecording(ConsentState(self.config),
                                         lambda rate, consent: self._recorder(session, rate, consent), session.id)
            session.slots.set(RECORDING_KEY, current)
        return current.attach(sink, sample_rate)

    async def session_ended(self, session: LiveCall) -> None:
        recording = session.slots.pop(RECORDING_KEY)
        if recording is not None:
            recording.finish()

    def _recorder(self, session: LiveCall, rate: int, consent: str) -> CallRecorder:
        identity = session.identity
        info = new_info(session.id, self.config.format, rate, transport=session.transport,
                        owner_key=self._owner_key(identity), identity_kind=identity.kind,
                        consent=consent, call_id=self._call_id_of(session))
        return CallRecorder(self.store, self.writers, info, self.config.format, finished=self._kept)

    def _kept(self, info: RecordingInfo) -> None:
        """A recording was finished and kept (on a writer thread: counters only)."""
        self.kept += 1
        count, size = self.stored
        self.stored = (count + 1, size + info.bytes)
        if self._telemetry is not None:
            self._telemetry.recording_kept(info.consent, info.format, info.bytes, info.gaps_s)

    # ---- retention -----------------------------------------------------------------------------------

    async def sweep(self) -> int:
        removed = await asyncio.to_thread(self.store.sweep, self.config.retention_days)
        if removed:
            log.info("expired recordings deleted", extra={"removed": removed})
        self.stored = await asyncio.to_thread(self.store.totals)
        return removed


    def describe(self) -> dict[str, Any]:
        count, size = self.stored
        return {"ok": True, "consent": self.config.consent, "format": self.config.format,
                "retention_days": self.config.retention_days, "stored": count, "stored_bytes": size,
                "kept": self.kept,
                "pending_s": round(self.writers.pending_bytes / (PENDING_RATE * STEREO_BYTES_PER_SAMPLE), 1),
                "refused_chunks": self.writers.refused, "chunk_s": CHUNK_FRAMES * FRAME_MS / 1000.0}
