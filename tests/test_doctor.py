"""`voicegate doctor`: the real command on a healthy config and with real faults on this machine."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port, run_cli
from tests.sip.certs import ThrowawayCa
from voicegate.internal.db import discover
from voicegate.internal.devices import cuda_devices_ctranslate2, devices_phrase, onnx_cuda_available
from voicegate.server.doctor import Check, exit_code, format_check, report_json, summary_line
from voicegate.server.doctor_probes import check_port, port_holder
from voicegate.server.version import version_label


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Shared, so the Whisper hashes are checked once for the module (the doctor records them there).
    return tmp_path_factory.mktemp("doctor-data")


def healthy_toml(data_dir: Path, extra: str = "", sip_port: int | None = None) -> str:
    """Free ports everywhere, so the config is healthy whatever else runs on this machine."""
    rtp = free_port(socket.SOCK_DGRAM) & ~1
    return (f"[server]\nport = {free_port()}\nhost = '127.0.0.1'\ndata_dir = '{data_dir}'\n"
            f"[sip]\nbind = '127.0.0.1:{sip_port or free_port(socket.SOCK_DGRAM)}'\n"
            f"rtp_port_min = {max(rtp, 1024)}\nrtp_port_max = {max(rtp, 1024) + 10}\n{extra}")


def doctor(tmp_path: Path, toml: str, *args: str,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.toml"
    path.write_text(toml)
    return run_cli("--config", str(path), "doctor", *args, env=env, timeout=180)


def lines_of(output: str, name: str) -> list[str]:
    """The check lines for `name`, each with its `fix:` line when it has one."""
    lines = output.splitlines()
    found = []
    for index, line in enumerate(lines):
        if line[5:].startswith(f"{name}:"):
            fix = lines[index + 1] if index + 1 < len(lines) and lines[index + 1].startswith("     fix:") else ""
            found.append(f"{line}\n{fix}" if fix else line)
    return found


def test_healthy_config_passes_every_check_and_exits_zero(tmp_path: Path, data_dir: Path) -> None:
    result = doctor(tmp_path, healthy_toml(data_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    *checks, summary = result.stdout.splitlines()
    assert checks and all(line[:5] in ("ok   ", "skip ") for line in checks), result.stdout
    for name in ("config", "port http", "port sip udp", "port sip tcp", "port rtp", "model whisper",
                 "model silero", "model smart turn"):
        assert lines_of(result.stdout, name)[0].startswith("ok   "), (name, result.stdout)
    assert " 0 failed, " in summary and summary.endswith(": ready"), summary


def test_sip_port_held_by_another_socket_fails_naming_port_holder_and_key(tmp_path: Path, data_dir: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        result = doctor(tmp_path, healthy_toml(data_dir, sip_port=port))
    assert result.returncode == 1
    [line] = lines_of(result.stdout, "port sip udp")
    assert line.startswith(f"FAIL port sip udp: port {port}/udp on 127.0.0.1 is used by PID {os.getpid()} (")
    assert "fix: stop it" in line and "set sip.bind to a free port" in line


def test_http_port_held_by_a_listener_fails_with_the_server_port_key(tmp_path: Path, data_dir: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        toml = healthy_toml(data_dir).replace("[server]\nport = ", f"[server]\nport = {port}\n# was ")
        result = doctor(tmp_path, toml)
    assert result.returncode == 1
    [line] = lines_of(result.stdout, "port http")
    assert f"port {port}/tcp on 127.0.0.1 is used by PID {os.getpid()}" in line and "set server.port" in line


def test_tls_port_is_checked_where_tls_bind_puts_it(tmp_path: Path, data_dir: Path) -> None:
    leaf = ThrowawayCa(tmp_path / "ca").issue("voicegate")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        tls = (f"transports = ['udp', 'tls']\ntls_bind = '127.0.0.1:{port}'\n"
               f"tls_cert = '{leaf.cert}'\ntls_key = '{leaf.key}'\n")
        result = doctor(tmp_path, healthy_toml(data_dir).replace("[sip]\n", "[sip]\n" + tls))
    [line] = lines_of(result.stdout, "port sip tls")
    assert line.startswith(f"FAIL port sip tls: port {port}/tcp on 127.0.0.1 is used by PID {os.getpid()}")
    assert "set sip.tls_bind to a free port" in line
    assert lines_of(result.stdout, "port sip udp")[0].startswith("ok   ")
    assert not lines_of(result.stdout, "port sip tcp")  # not a configured transport


def test_missing_espeak_ng_fails_with_the_apt_command(tmp_path: Path, data_dir: Path) -> None:
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    result = doctor(tmp_path, healthy_toml(data_dir, "[tts]\nprovider = 'espeak'\n"), env={"PATH": str(empty_bin)})
    assert result.returncode == 1, result.stdout
    [line] = lines_of(result.stdout, "espeak-ng")
    assert line.startswith("FAIL espeak-ng: 'espeak-ng' is not on PATH")
    assert line.endswith("fix: sudo apt-get install espeak-ng")
    # Test tools are information: missing, they are skipped, never failures.
    assert lines_of(result.stdout, "sipp")[0].startswith("skip sipp: not installed")
    assert sum(line.startswith("FAIL") for line in result.stdout.splitlines()) == 1, result.stdout


def test_unreachable_database_fails_with_its_address_and_never_its_password(tmp_path: Path, data_dir: Path) -> None:
    closed = free_port()  # bound and released: nothing listens there
    url = f"postgresql://voicegate:db-pa55word@127.0.0.1:{closed}/voicegate"
    result = doctor(tmp_path, healthy_toml(data_dir, f"[rag]\nprovider = 'pgvector'\n[pgvector]\n"
                                                     f"connection_string = '{url}'\n"))
    assert result.returncode == 1
    [line] = lines_of(result.stdout, "database")
    assert line.startswith(f"FAIL database: cannot reach PostgreSQL at 127.0.0.1:{closed}/voicegate: ")
    assert "refused" in line and "pgvector.connection_string" in line
    assert "db-pa55word" not in result.stdout + result.stderr


def test_reachable_database_with_pgvector_passes(tmp_path: Path, data_dir: Path, fresh_db: str) -> None:
    result = doctor(tmp_path, healthy_toml(data_dir, f"[rag]\nprovider = 'pgvector'\n[pgvector]\n"
                                                     f"connection_string = '{fresh_db}'\n"))
    [line] = lines_of(result.stdout, "database")
    assert line.startswith("ok   database: PostgreSQL at ") and line.endswith("pgvector is available"), line
    assert result.returncode == 0, result.stdout


def test_invalid_config_value_fails_naming_the_key(tmp_path: Path) -> None:
    result = doctor(tmp_path, "[memory]\nmax_chars = -5\n")
    assert result.returncode == 1
    [line] = lines_of(result.stdout, "config")
    assert line.startswith("FAIL config: ") and "memory.max_chars: must be > 0 (got -5)" in line
    assert "fix: correct that key" in line
    assert "skip other checks: not run" in result.stdout and "Traceback" not in result.stderr


def test_cloud_llm_without_its_key_fails_naming_the_variable(tmp_path: Path, data_dir: Path) -> None:
    toml = healthy_toml(data_dir, "[llm]\nprovider = 'openai'\n")
    result = doctor(tmp_path, toml)
    assert result.returncode == 1
    [line] = lines_of(result.stdout, "secret llm")
    assert line.startswith('FAIL secret llm: llm.provider "openai" needs openai.api_key is not set')
    assert "OPENAI_API_KEY" in line and 'llm.provider = "local"' in line
    given = doctor(tmp_path, toml, env={"OPENAI_API_KEY": "sk-doctor-secret-42"})
    assert lines_of(given.stdout, "secret llm")[0].startswith("ok   secret llm:"), given.stdout
    assert given.returncode == 0 and "sk-doctor-secret-42" not in given.stdout + given.stderr


def test_sip_auth_without_users_fails_and_passwords_are_never_printed(tmp_path: Path, data_dir: Path) -> None:
    empty = doctor(tmp_path, healthy_toml(data_dir, "[sip.auth]\nenabled = true\n"))
    assert lines_of(empty.stdout, "secret sip auth")[0].startswith("FAIL secret sip auth: sip.auth.enabled but")
    users = doctor(tmp_path, healthy_toml(data_dir, "[sip.auth]\nenabled = true\n[sip.auth.users]\n"
                                                    "alice = 'alice-pw-9931'\n"))
    assert lines_of(users.stdout, "secret sip auth") == ["ok   secret sip auth: 1 user(s) with passwords"]
    assert "alice-pw-9931" not in users.stdout + users.stderr


def test_memory_on_checks_the_embedded_database_and_the_memory_model_key(tmp_path: Path, data_dir: Path) -> None:
    result = doctor(tmp_path, healthy_toml(data_dir, "[memory]\nenabled = true\nauto = true\n"))
    assert lines_of(result.stdout, "database") == [
        f"ok   database: embedded PostgreSQL (pgserver) in {data_dir / 'postgres'}"]
    assert lines_of(result.stdout, "secret memory owner key")[0].startswith("ok   secret memory owner key: ")
    [model] = lines_of(result.stdout, "secret memory model")
    assert model.startswith("FAIL secret memory model: memory.auto is on") and "VOICEGATE_MEMORY__API_KEY" in model
    assert result.returncode == 1
    assert not (data_dir / "postgres").exists()  # looked, started nothing


def test_empty_models_dir_fails_with_the_set_up_command(tmp_path: Path, data_dir: Path) -> None:
    empty = tmp_path / "models"
    empty.mkdir()
    result = doctor(tmp_path, healthy_toml(data_dir, f"[whisper]\nmodel = '{empty}'\n[pipeline]\n"
                                                     f"end_of_turn_model = '{empty / 'smart-turn-v3.2-cpu.onnx'}'\n"))
    assert result.returncode == 1
    [whisper] = lines_of(result.stdout, "model whisper")
    assert whisper.startswith(f"FAIL model whisper: no Whisper model \"{empty}\"") and "make serve" in whisper
    [turn] = lines_of(result.stdout, "model smart turn")
    assert turn.startswith("FAIL model smart turn: pipeline.end_of_turn_model: ") and str(empty) in turn
    assert "-m voicegate.internal.turn.weights" in turn and 'pipeline.end_of_turn = "off"' in turn


def test_each_local_engine_reports_the_device_it_would_compute_on(tmp_path: Path, data_dir: Path) -> None:
    result = doctor(tmp_path, healthy_toml(data_dir, "[pipeline]\nend_of_turn_device = 'cpu'\n"))
    assert result.returncode == 0, result.stdout + result.stderr
    count = cuda_devices_ctranslate2()
    whisper = "cuda float16" if count else "cpu int8"
    assert lines_of(result.stdout, "device whisper") == [f"ok   device whisper: {whisper} ({devices_phrase(count)})"]
    cuda = onnx_cuda_available()
    onnx = "onnxruntime has its CUDA provider" if cuda else "onnxruntime has no CUDA provider"
    assert lines_of(result.stdout, "device piper") == [f"ok   device piper: {'cuda' if cuda else 'cpu'} ({onnx})"]
    assert lines_of(result.stdout, "device smart turn") == [
        f'ok   device smart turn: cpu (pipeline.end_of_turn_device = "cpu"; {onnx})']


@pytest.mark.skipif(cuda_devices_ctranslate2() > 0, reason="this machine has a CUDA device: nothing to refuse")
def test_whisper_on_cuda_without_a_gpu_fails_naming_the_key_with_the_fix(tmp_path: Path, data_dir: Path) -> None:
    result = doctor(tmp_path, healthy_toml(data_dir, "[whisper]\ndevice = 'cuda'\n"))
    assert result.returncode == 1
    [line] = lines_of(result.stdout, "device whisper")
    assert line.startswith('FAIL device whisper: whisper.device: "cuda" but CTranslate2 sees no CUDA device')
    assert "fix: install the NVIDIA driver, cuBLAS for CUDA 12 and cuDNN 9" in line
    assert 'set whisper.device = "auto"' in line


def test_json_output_is_one_document_with_every_check(tmp_path: Path, data_dir: Path) -> None:
    result = doctor(tmp_path, healthy_toml(data_dir, "[llm]\nprovider = 'openai'\n"), "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    by_name = {check["name"]: check for check in report["checks"]}
    assert by_name["secret llm"]["ok"] is False and "OPENAI_API_KEY" in by_name["secret llm"]["fix"]
    assert by_name["config"] == {"name": "config", "ok": True, "detail": by_name["config"]["detail"], "fix": ""}


# ---- the pure parts ---------------------------------------------------------------------------------------

def test_a_failure_prints_its_fix_on_the_next_line() -> None:
    check = Check("port sip udp", False, "port 5060/udp on 0.0.0.0 is used by PID 7 (asterisk)",
                  "stop it (kill 7) or set sip.bind to a free port")
    assert format_check(check) == ("FAIL port sip udp: port 5060/udp on 0.0.0.0 is used by PID 7 (asterisk)\n"
                                   "     fix: stop it (kill 7) or set sip.bind to a free port")


def test_passes_and_skips_are_one_line_aligned_with_failures() -> None:
    assert format_check(Check("config", True, "valid", "unused")) == "ok   config: valid"
    assert format_check(Check("database", None, "not needed")) == "skip database: not needed"


def test_summary_and_exit_code_count_only_failures() -> None:
    checks = [Check("a", True, ""), Check("b", None, ""), Check("c", True, "")]
    assert summary_line(checks) == "2 ok, 0 failed, 1 skipped: ready" and exit_code(checks) == 0
    checks += [Check("d", False, "", "x"), Check("e", False, "", "y")]
    assert summary_line(checks) == "2 ok, 2 failed, 1 skipped: 2 problems to fix" and exit_code(checks) == 1
    assert json.loads(report_json(checks))["ok"] is False


@pytest.fixture
def held_udp() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def test_port_holder_names_this_process(held_udp: int) -> None:
    name = Path("/proc/self/comm").read_text().strip()
    assert port_holder(held_udp, "udp") == f"PID {os.getpid()} ({name})"
    check = check_port("port rtp", "127.0.0.1", held_udp, socket.SOCK_DGRAM, "sip.rtp_port_min/sip.rtp_port_max")
    assert check.ok is False and f"kill {os.getpid()}" in check.fix
    assert port_holder(free_port(socket.SOCK_DGRAM), "udp") == ""  # nobody holds a released port


def test_the_package_check_names_what_an_installation_lacks(tmp_path: Path) -> None:
    from voicegate.internal.db.migrator import MIGRATIONS
    from voicegate.internal.pipeline.context import BUILTIN_PROMPT
    from voicegate.server.doctor import package_files

    assert package_files(MIGRATIONS, {"prompt": BUILTIN_PROMPT}) == ([f"{len(discover())} migrations", "prompt"], [])
    broken = tmp_path / "site-packages"  # an install whose SQL and prompt were left out
    broken.mkdir()
    assert package_files(broken, {"prompt": broken / "PROMPT.md"}) == (
        [], [f"migrations ({broken})", f"prompt ({broken / 'PROMPT.md'})"])


def test_the_doctor_starts_with_the_package_even_when_the_config_is_broken(tmp_path: Path) -> None:
    result = doctor(tmp_path, "[memory]\nmax_chars = -5\n")
    first, second = result.stdout.splitlines()[:2]
    assert first.startswith(f"ok   package: voicegate {version_label()} from the checkout at "), first
    assert second.startswith("FAIL config: ")
