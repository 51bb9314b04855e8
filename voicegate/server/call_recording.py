"""Wiring call recording into a server (`[recording] enabled = true`): the service, the pipelines' hook, the
end of each session, the metrics, and the caller's identity key the sidecars carry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from voicegate.internal.config import Config
from voicegate.internal.conversation.state import LiveCall
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.memory.owner import OwnerKeys, keep, read_secret
from voicegate.internal.recording.retention import RecordingRetention
from voicegate.internal.recording.service import RecordingService
from voicegate.internal.recording.store import RECORDINGS_DIR, RecordingStore
from voicegate.internal.sip.voice.call import SIP_CALL_ID
from voicegate.internal.telemetry.otel import Telemetry

if TYPE_CHECKING:
    from voicegate.internal.memory.runtime import FrontendMemoryRuntime


def owner_key_function(config: Config, memory: FrontendMemoryRuntime | None) -> Callable[[CallerIdentity], str | None]:
    """How a recording names its caller: the memory owner key of their verified identity, so the same
    `voicegate memory delete --caller` erases both. With memory off, the same secret (memory.owner_key_secret
    or data_dir/owner-key.secret, created like memory creates it) makes the same key."""
    if memory is not None:
        return memory.owner_key
    secret = read_secret(config.memory.owner_key_secret, config.data_dir)
    keep(secret)
    return OwnerKeys(secret.value).for_identity


def sip_call_id(session: LiveCall) -> str:
    return str(session.slots.get(SIP_CALL_ID, ""))


async def start_recordings(config: Config, telemetry: Telemetry,
                           memory: FrontendMemoryRuntime | None) -> RecordingService:
    service = RecordingService(config.recording, config.data_dir, owner_key=owner_key_function(config, memory),
                               call_id_of=sip_call_id, telemetry=telemetry)
    await service.start()
    telemetry.watch_recordings(lambda: service.stored)
    return service


def start_retention(config: Config) -> RecordingRetention:
    """Recording off: the recordings already in this data directory still expire (retention.py)."""
    retention = RecordingRetention(RecordingStore(config.data_dir / RECORDINGS_DIR), config.recording.retention_days,
                                   config.recording.sweep_interval_s)
    retention.start()
    return retention


def recording_store(config: Config, recordings: RecordingService | None) -> RecordingStore:
    """This node's call recordings, whether or not recording is on now (old ones are still the caller's)."""
    if recordings is not None:
        return recordings.store
    return RecordingStore(config.data_dir / RECORDINGS_DIR)
