"""`voicegate memory export` lists a caller's recordings, and `purge-expired` deletes recordings past
`recording.retention_days`, as processes of their own on the server's data directory."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.conftest import run_cli
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.memory.owner import OwnerKeys
from voicegate.internal.recording.store import RecordingInfo, RecordingStore, iso

SECRET = "recording-cli-test-secret-0123456789"
CALLER = "sip:+15551234567"


def setup(tmp_path: Path) -> tuple[Path, RecordingStore, str]:
    data = tmp_path / "data"
    config = tmp_path / "voicegate.toml"
    config.write_text(f'[server]\ndata_dir = "{data}"\n\n[memory]\nprovider = "markdown"\n'
                      f'owner_key_secret = "{SECRET}"\n\n[recording]\nretention_days = 30\n')
    store = RecordingStore(data / "recordings")
    store.ensure()
    owner = OwnerKeys(SECRET.encode()).for_identity(CallerIdentity.parse(CALLER))
    assert owner is not None
    return config, store, owner


def recording(store: RecordingStore, session: str, owner: str | None, ended: float) -> RecordingInfo:
    info = RecordingInfo(session_id=session, file=f"{session}.wav", format="wav", sample_rate=8000, transport="sip",
                         owner_key=owner, identity_kind="sip", consent="granted", started_at=iso(ended - 60),
                         ended_at=iso(ended), duration_s=60.0, bytes=4)
    store.audio_path(info).write_bytes(b"RIFF")
    store.write(info)
    return info


def test_export_lists_the_callers_recordings_with_their_paths(tmp_path: Path) -> None:
    config, store, owner = setup(tmp_path)
    mine = recording(store, "a" * 24, owner, time.time())
    recording(store, "b" * 24, "f" * 64, time.time())  # someone else's
    done = run_cli("memory", "export", "--caller", CALLER, "--config", str(config))
    assert done.returncode == 0, done.stderr
    export = json.loads(done.stdout)
    assert export["counts"]["recordings"] == 1 and export["stored"] is True
    (listed,) = export["recordings"]
    assert listed["session_id"] == mine.session_id and listed["consent"] == "granted"
    assert listed["path"] == str(store.audio_path(mine).resolve()) and "+1555" not in json.dumps(listed)


def test_purge_expired_deletes_recordings_past_their_retention(tmp_path: Path) -> None:
    config, store, owner = setup(tmp_path)
    old = recording(store, "c" * 24, owner, time.time() - 31 * 86400)
    new = recording(store, "d" * 24, None, time.time() - 29 * 86400)
    done = run_cli("memory", "purge-expired", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert "call recordings (files): 1 removed" in done.stdout, done.stdout
    assert not store.audio_path(old).exists() and store.read(old.session_id) is None
    assert store.audio_path(new).exists() and store.read(new.session_id) is not None
