"""`voicegate rag ingest / list / delete`, end to end in a subprocess against a real PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_cli

TIMEOUT_S = 180  # a loaded 2-core machine: interpreter start, wordllama load, migrations


def rag_env(uri: str, tmp_path: Path, provider: str = "pgvector") -> dict[str, str]:
    return {"VOICEGATE_PGVECTOR__CONNECTION_STRING": uri, "VOICEGATE_RAG__PROVIDER": provider,
            "VOICEGATE_SERVER__DATA_DIR": str(tmp_path / "data")}


def test_ingest_shows_progress_and_a_summary_and_a_second_run_reports_unchanged(
        fresh_db: str, tmp_path: Path, corpus: dict[str, Path]) -> None:
    env = rag_env(fresh_db, tmp_path)
    files = [str(p) for p in corpus.values()]

    first = run_cli("rag", "ingest", *files, env=env, timeout=TIMEOUT_S)
    assert first.returncode == 0, first.stderr
    assert "ingest: 0/4 chunks" in first.stderr and "ingest: 4/4 chunks" in first.stderr
    assert "4 file(s) ingested: 4 chunk(s) added, 0 unchanged, 0 removed" in first.stdout
    assert f"changed   +1 =0 -0  {corpus['hours.md'].resolve()}" in first.stdout

    second = run_cli("rag", "ingest", *files, env=env, timeout=TIMEOUT_S)
    assert second.returncode == 0, second.stderr
    assert "4 file(s) ingested: 0 chunk(s) added, 4 unchanged, 0 removed" in second.stdout
    assert second.stdout.count("unchanged +0 =1 -0") == 4

    listed = run_cli("rag", "list", env=env, timeout=TIMEOUT_S)
    assert listed.returncode == 0, listed.stderr
    assert all(str(p.resolve()) in listed.stdout for p in corpus.values())
    assert "(4 source(s), 4 chunk(s))" in listed.stdout

    deleted = run_cli("rag", "delete", str(corpus["parking.md"]), env=env, timeout=TIMEOUT_S)
    assert deleted.returncode == 0, deleted.stderr
    assert f"deleted 1 chunk(s) of {corpus['parking.md'].resolve()}" in deleted.stdout
    gone = run_cli("rag", "delete", str(corpus["parking.md"]), env=env, timeout=TIMEOUT_S)
    assert gone.returncode == 1 and "nothing stored" in gone.stderr


def test_chunk_settings_from_the_command_line_and_a_changed_file(
        fresh_db: str, tmp_path: Path) -> None:
    env = rag_env(fresh_db, tmp_path)
    path = tmp_path / "notes.txt"
    path.write_text(" ".join(f"w{i}" for i in range(25)))
    first = run_cli("rag", "ingest", str(path), "--chunk-size", "10", "--chunk-overlap", "0", env=env,
                    timeout=TIMEOUT_S)
    assert "1 file(s) ingested: 3 chunk(s) added" in first.stdout, first.stderr
    path.write_text(" ".join(f"w{i}" for i in range(12)))
    second = run_cli("rag", "ingest", str(path), "--chunk-size", "10", "--chunk-overlap", "0", env=env,
                     timeout=TIMEOUT_S)
    assert second.returncode == 0, second.stderr
    assert "1 file(s) ingested: 1 chunk(s) added, 1 unchanged, 2 removed" in second.stdout


def test_unreadable_files_exit_2_after_the_readable_ones_are_ingested(
        fresh_db: str, tmp_path: Path, corpus: dict[str, Path]) -> None:
    env = rag_env(fresh_db, tmp_path)
    (tmp_path / "slides.pdf").write_bytes(b"%PDF-1.4")
    result = run_cli("rag", "ingest", str(corpus["hours.md"]), str(tmp_path / "missing.md"),
                     str(tmp_path / "slides.pdf"), env=env, timeout=TIMEOUT_S)
    assert result.returncode == 2
    assert "missing.md: no such file" in result.stderr
    assert "slides.pdf" in result.stderr
    assert "1 file(s) ingested: 1 chunk(s) added, 0 unchanged, 0 removed; 2 file(s) skipped" in result.stdout


def test_bad_arguments_and_missing_configuration_exit_with_a_reason(fresh_db: str, tmp_path: Path,
                                                                    corpus: dict[str, Path]) -> None:
    env = rag_env(fresh_db, tmp_path)
    overlap = run_cli("rag", "ingest", str(corpus["hours.md"]), "--chunk-size", "10", "--chunk-overlap", "10",
                      env=env, timeout=TIMEOUT_S)
    assert overlap.returncode == 2 and "overlap" in overlap.stderr

    no_files = run_cli("rag", "ingest", env=env, timeout=TIMEOUT_S)
    assert no_files.returncode == 2

    off = run_cli("rag", "list", env={**env, "VOICEGATE_RAG__PROVIDER": ""}, timeout=TIMEOUT_S)
    assert off.returncode == 1 and "[rag] provider" in off.stderr

    supabase = run_cli("rag", "list", env={**env, "VOICEGATE_RAG__PROVIDER": "supabase"}, timeout=TIMEOUT_S)
    assert supabase.returncode == 1 and "[supabase] url" in supabase.stderr

    unreachable = run_cli("rag", "list", env={
        **env, "VOICEGATE_PGVECTOR__CONNECTION_STRING": f"postgresql://postgres:@/postgres?host={tmp_path}/nowhere",
    }, timeout=TIMEOUT_S)
    assert unreachable.returncode == 1 and "cannot reach the database" in unreachable.stderr


def test_ingest_and_list_against_supabase(tmp_path: Path, corpus: dict[str, Path]) -> None:
    from tests.fakes.postgrest_fake import FakePostgrest

    with FakePostgrest(api_key="sb-key", table="documents") as fake:
        env = {"VOICEGATE_RAG__PROVIDER": "supabase", "VOICEGATE_SUPABASE__URL": fake.url,
               "VOICEGATE_SUPABASE__API_KEY": "sb-key", "VOICEGATE_SERVER__DATA_DIR": str(tmp_path / "data")}
        files = [str(p) for p in corpus.values()]
        first = run_cli("rag", "ingest", *files, env=env, timeout=TIMEOUT_S)
        assert first.returncode == 0, first.stderr
        assert "4 file(s) ingested: 4 chunk(s) added" in first.stdout
        assert len(fake.rows) == 4
        second = run_cli("rag", "ingest", *files, env=env, timeout=TIMEOUT_S)
        assert "0 chunk(s) added, 4 unchanged" in second.stdout, second.stderr
        listed = run_cli("rag", "list", env=env, timeout=TIMEOUT_S)
        assert "(4 source(s), 4 chunk(s))" in listed.stdout, listed.stderr
        assert "sb-key" not in first.stderr + second.stderr + listed.stderr


def test_help_says_what_the_rag_command_manages() -> None:
    about = "manage the documents that knowledge retrieval (RAG) searches: ingest, list, delete"
    top = run_cli("--help", timeout=TIMEOUT_S)
    assert top.returncode == 0, top.stderr
    assert about in " ".join(top.stdout.split())
    rag = run_cli("rag", "--help", timeout=TIMEOUT_S)
    assert rag.returncode == 0, rag.stderr
    assert "Manage the documents that knowledge retrieval (RAG) searches: ingest, list, delete." in \
        " ".join(rag.stdout.split())
