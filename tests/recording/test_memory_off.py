"""With memory off (the default) a caller's recordings can still be erased, exported and swept: through
DELETE /api/admin/memory/{caller} on a running server, through `voicegate memory delete|export|purge-expired`
as processes of their own, and by the server's retention sweep with recording off too."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from tests.conftest import run_cli
from tests.webrtc.harness import live_server, webrtc_config
from voicegate.internal.identity import CallerIdentity
from voicegate.internal.memory.owner import SECRET_FILE, OwnerKeys
from voicegate.internal.recording.store import RecordingInfo, RecordingStore, iso

CALLER = "sip:+15551234567"
API_KEY = "memory-off-admin-key-0123456789"
SECRET = b"owner-key-secret-of-the-data-directory-0123"


def data_directory(tmp_path: Path) -> tuple[Path, RecordingStore, str]:
    """A data directory as a server that recorded with memory off leaves it: the owner-key secret file it
    created, and the recordings directory."""
    data = tmp_path / "data"
    data.mkdir()
    (data / SECRET_FILE).write_bytes(SECRET)
    store = RecordingStore(data / "recordings")
    store.ensure()
    owner = OwnerKeys(SECRET).for_identity(CallerIdentity.parse(CALLER))
    assert owner is not None
    return data, store, owner


def recording(store: RecordingStore, session: str, owner: str | None, ended: float) -> RecordingInfo:
    info = RecordingInfo(session_id=session, file=f"{session}.wav", format="wav", sample_rate=8000, transport="sip",
                         owner_key=owner, identity_kind="sip", consent="granted", started_at=iso(ended - 60),
                         ended_at=iso(ended), duration_s=60.0, bytes=4)
    store.audio_path(info).write_bytes(b"RIFF")
    store.write(info)
    return info


def memory_off_config(tmp_path: Path, data: Path) -> Path:
    """The defaults (memory off, provider pgvector, recording off) on this data directory."""
    config = tmp_path / "voicegate.toml"
    config.write_text(f'[server]\ndata_dir = "{data}"\n\n[recording]\nretention_days = 30\n')
    return config


async def test_the_admin_route_erases_a_callers_recordings_with_memory_off(tmp_path: Path) -> None:
    data, store, owner = data_directory(tmp_path)
    mine = [recording(store, "a" * 24, owner, time.time()), recording(store, "b" * 24, owner, time.time() - 86400)]
    theirs = recording(store, "c" * 24, "f" * 64, time.time())
    expired = recording(store, "d" * 24, None, time.time() - 31 * 86400)
    config = webrtc_config(tmp_path, api_key=API_KEY)
    config.server.data_dir = str(data)
    assert not config.memory.enabled and not config.recording.enabled
    config.recording.retention_days = 30
    async with live_server(config) as live:
        async with live.http() as http:
            assert (await http.delete(f"/api/admin/memory/{CALLER}")).status_code == 401
            response = await http.delete(f"/api/admin/memory/{CALLER}", headers={"X-API-Key": API_KEY})
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["caller"] == CALLER and body["total"] == 2 and body["servers_told"] is False
            assert sorted(body["recordings"]) == sorted(info.file for info in mine)
            assert body["removed"] == {"call recordings (files)": 2}
            by_key = await http.delete(f"/api/admin/memory/{theirs.owner_key}?kind=owner_key",
                                       headers={"X-API-Key": API_KEY})
            assert by_key.status_code == 200 and by_key.json()["recordings"] == [theirs.file]
            # The retention sweep runs with recording off: the recording past retention_days is gone.
            for _ in range(100):
                if not store.audio_path(expired).exists():
                    break
                await asyncio.sleep(0.05)
    assert not any(store.audio_path(info).exists() for info in [*mine, theirs, expired])
    assert list(store.all()) == []


def test_the_cli_exports_deletes_and_purges_recordings_with_memory_off(tmp_path: Path) -> None:
    data, store, owner = data_directory(tmp_path)
    config = memory_off_config(tmp_path, data)
    mine = recording(store, "e" * 24, owner, time.time())
    theirs = recording(store, "f" * 24, "e" * 64, time.time())
    old = recording(store, "g" * 24, "e" * 64, time.time() - 31 * 86400)

    exported = run_cli("memory", "export", "--caller", CALLER, "--config", str(config))
    assert exported.returncode == 0, exported.stderr
    export = json.loads(exported.stdout)
    assert export["memory"] == "off" and export["stored"] is True and export["counts"] == {"recordings": 1}
    (listed,) = export["recordings"]
    assert listed["session_id"] == mine.session_id and listed["path"] == str(store.audio_path(mine).resolve())

    purged = run_cli("memory", "purge-expired", "--config", str(config))
    assert purged.returncode == 0, purged.stderr
    assert "call recordings (files): 1 removed" in purged.stdout
    assert not store.audio_path(old).exists() and store.audio_path(theirs).exists()

    deleted = run_cli("memory", "delete", "--caller", CALLER, "--yes", "--config", str(config))
    assert deleted.returncode == 0, deleted.stderr
    assert mine.file in deleted.stdout and "call recordings (files): 1 removed" in deleted.stdout
    assert not store.audio_path(mine).exists() and store.read(mine.session_id) is None
    assert store.audio_path(theirs).exists()  # someone else's stays

    again = run_cli("memory", "delete", "--caller", CALLER, "--yes", "--config", str(config))
    assert again.returncode == 3, again.stderr  # nothing left of the caller
    assert run_cli("memory", "show", "--caller", CALLER, "--config", str(config)).returncode == 1
