"""`voicegate memory ...` as an operator runs it (docs/memory.md): each command a process of its own,
on one PostgreSQL database."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow
CALLER = "sip:+15551234567"


def write_config(directory: Path, db: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "config.toml"
    path.write_text(f'[server]\ndata_dir = "{directory / "data"}"\n\n[memory]\nenabled = true\n\n'
                    f'[pgvector]\nconnection_string = "{db}"\n')
    return path


def memory(config: Path, *args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    done = run_cli("--config", str(config), "memory", *args, cwd=cwd, timeout=120)
    return done.returncode, done.stdout, done.stderr


def test_edit_show_export_list_and_delete_by_key_as_written(tmp_path: Path, fresh_db: str) -> None:
    operator = write_config(tmp_path / "operator", fresh_db)
    rc, out, err = memory(operator, "edit", "--caller", CALLER, "--document", "memory", "--append",
                          "- The caller likes oolong tea.")
    assert rc == 0 and "revision 1" in out, err
    rc, out, err = memory(operator, "show", "--caller", CALLER)
    assert rc == 0 and "oolong" in out, err

    exported = tmp_path / "export.json"
    rc, out, err = memory(operator, "export", "--caller", CALLER, "--output", str(exported))
    assert rc == 0, err
    assert "row(s) read" in err and str(exported) in err  # progress and where it went, on stderr
    assert exported.stat().st_mode & 0o777 == 0o600  # a caller's whole memory: the operator's eyes only
    data = json.loads(exported.read_text())
    tables = data["tables"]
    assert data["caller"] == CALLER and data["owner_key"] and data["stored"] is True
    assert tables["memories"][0]["content"] == "- The caller likes oolong tea."
    assert [item["text"] for item in tables["memory_items"]] == ["The caller likes oolong tea."]
    assert [row["revision"] for row in tables["memory_history"]] == [1]
    assert "content" not in tables["memory_history"][0]  # history holds no text
    assert [line["operation"] for line in data["audit"]] == ["append"]

    rc, out, err = memory(operator, "list", "--full")
    keys = re.findall(r"\b[0-9a-f]{64}\b", out)
    assert rc == 0 and keys == [data["owner_key"]], out

    # Another operator, elsewhere, without the owner-key secret: a delete by key works all the same.
    elsewhere = write_config(tmp_path / "elsewhere", fresh_db)
    rc, out, err = memory(elsewhere, "delete", "--owner-key", keys[0], "--yes", cwd=tmp_path)
    assert rc == 0, err
    assert "memories: 1 removed" in out and "memory_items: 1 removed" in out and "memory_history: 1 removed" in out
    assert "running servers on this database were told" in out
    assert not (tmp_path / "elsewhere" / "data" / "owner-key.secret").exists()  # none was made up

    rc, out, err = memory(operator, "show", "--caller", CALLER)
    assert rc == 3 and "no memory" in err
    rc, out, err = memory(operator, "delete", "--caller", CALLER, "--yes")
    assert rc == 3  # nothing left to delete: said, not pretended
