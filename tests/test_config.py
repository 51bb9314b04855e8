from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from voicegate.internal.config import ConfigError, load_config, masked, render_toml, secret_values


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_defaults_are_the_documented_ones() -> None:
    config = load_config(None)
    assert config.server.port == 8080
    assert config.sip.bind == "0.0.0.0:5060"
    assert (config.sip.bind_host, config.sip.bind_port) == ("0.0.0.0", 5060)
    assert config.memory.enabled is False
    assert config.memory.provider == "pgvector"
    assert config.memory.max_chars == 2000
    assert config.memory.retention_days == 90
    assert config.stt.provider == "whisper"
    assert config.tts.provider == "auto"
    assert config.effective_llm_provider == "local"


def test_the_packaged_config_toml_is_valid_and_equals_the_defaults() -> None:
    # The package's file, not the root's config.toml: that is a link to it for readers, and a plain text
    # file naming it in a checkout without symbolic links (tests/package/test_checkout.py).
    packaged = REPO / "voicegate" / "internal" / "config" / "config.toml"
    assert load_config(packaged).model_dump() == load_config(None).model_dump()


def test_file_overrides_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, '[memory]\nenabled = true\nmax_chars = 500\n[sip]\nbind = "127.0.0.1:5070"\n'))
    assert config.memory.enabled and config.memory.max_chars == 500
    assert config.sip.bind_port == 5070
    assert config.memory.retention_days == 90  # untouched keys keep their defaults


def test_environment_overrides_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "[memory]\nmax_chars = 500\nretention_days = 10\n")
    monkeypatch.setenv("VOICEGATE_MEMORY__MAX_CHARS", "700")
    monkeypatch.setenv("VOICEGATE_SIP__TRANSPORTS", '["tcp"]')
    config = load_config(path)
    assert config.memory.max_chars == 700
    assert config.memory.retention_days == 10
    assert config.sip.transports == ["tcp"]


def test_conventional_secret_names_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-123456")
    monkeypatch.setenv("DEEPGRAM_API_KEY", "dg-key")
    monkeypatch.setenv("VOICEGATE_JWT_SECRET", "jwt-secret-value")
    monkeypatch.setenv("VOICEGATE_API_KEY", "deployer-key-0123456")
    config = load_config(None)
    assert config.openai.api_key == "sk-from-env-123456"
    assert config.deepgram.api_key == "dg-key"
    assert config.server.jwt_secret == "jwt-secret-value"
    assert config.server.api_key == "deployer-key-0123456"
    assert config.effective_llm_provider == "openai"


def test_explicit_env_name_beats_conventional_secret_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "conventional")
    monkeypatch.setenv("VOICEGATE_OPENAI__API_KEY", "explicit")
    assert load_config(None).openai.api_key == "explicit"


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("[memory]\nmax_chars = -5\n", "memory.max_chars: must be > 0 (got -5)"),
        ("[memory]\nretention_days = 0\n", "memory.retention_days: must be > 0 (got 0)"),
        ("[memory]\nprovider = 'redis'\n", "memory.provider: must be one of 'pgvector', 'memory' or 'markdown'"),
        ("[memory]\nflavour = 1\n", "memory.flavour: unknown key"),
        ("[nonsense]\nx = 1\n", "nonsense: unknown key"),
        ("[server]\nport = 'eighty'\n", "server.port: must be a whole number (got 'eighty')"),
        ("[server]\nport = 70000\n", "server.port: must be < 65536 (got 70000)"),
        ("[server]\ndev_login = 'maybe'\n", "server.dev_login: must be true or false (got 'maybe')"),
        ("[sip]\nbind = 'host:99999'\n", "sip.bind: port must be 0-65535 in 'host:99999'"),
        ("[sip]\ntrusted_peers = ['10.0.0.0/8', 'office']\n", "sip.trusted_peers: not an IP address or CIDR: 'office'"),
        ("[sip]\ntransports = []\n", "sip.transports: must name at least one"),
        ("[sip]\ntransports = ['tls']\n", 'sip: tls_cert is required when transports include "tls"'),
        ("[sip]\nsrtp = 'always'\n", "sip.srtp: must be one of 'off', 'accept', 'optional' or 'required'"),
        ("[server]\napi_key = 'hunter2'\n", "server.api_key: must be at least 16 bytes (it has 7)"),
        ("[server]\njwt_secret = 'short'\n", "server.jwt_secret: must be at least 16 bytes (it has 5)"),
        ("[sip]\ntransports = ['sctp']\n", "sip.transports.0: must be one of 'udp', 'tcp' or 'tls'"),
        ("[pgvector]\ntable = 'x; drop table y'\n", "pgvector.table: must be a plain SQL identifier"),
        ("[memory]\nsensitive_patterns = ['(']\n", "memory.sensitive_patterns: bad regular expression '('"),
        ("[memory]\nshared_numbers = ['+15550100000', 'front desk']\n",
         "memory.shared_numbers: not a phone number in region US (sip.default_region): 'front desk'"),
        ("[sip]\noutbound_memory = 'always'\n", "sip.outbound_memory: must be one of 'none' or 'dialled'"),
    ],
)
def test_every_validation_error_names_file_key_and_reason(tmp_path: Path, toml: str, expected: str) -> None:
    path = write(tmp_path, toml)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert f"{path}: {expected}" in str(caught.value)


def test_bad_environment_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICEGATE_MEMORY__MAX_CHARS", "-1")
    with pytest.raises(ConfigError) as caught:
        load_config(None)
    assert "VOICEGATE_MEMORY__MAX_CHARS: memory.max_chars: must be > 0 (got '-1')" in str(caught.value)


def test_shared_numbers_are_normalised_to_e164_with_the_default_region(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "[sip]\ndefault_region = 'GB'\n[memory]\n"
                           "shared_numbers = ['020 7946 0000', '+44 20 7946 0000', '+1 555 010 0000']\n")
    assert load_config(path).memory.shared_numbers == ["+442079460000", "+15550100000"]
    monkeypatch.setenv("VOICEGATE_MEMORY__SHARED_NUMBERS", '["reception"]')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert "VOICEGATE_MEMORY__SHARED_NUMBERS: memory.shared_numbers: not a phone number" in str(caught.value)


def test_broken_toml_and_missing_file_are_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[memory\n"))
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "absent.toml")


def test_secrets_are_masked(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, (
        "[openai]\napi_key = 'sk-real-key-000'\n[server]\njwt_secret = 'jwt-s3cret-0123456789'\n"
        "trusted_header_secret = 'proxy-s3cret-0123'\n"
        "[sip.auth]\nusers = { alice = 'pw-alice' }\n"
        "[pgvector]\nconnection_string = 'postgresql://u:p@db/x'\n"
    )))
    text = render_toml(masked(config))
    for secret in ("sk-real-key-000", "jwt-s3cret-0123456789", "proxy-s3cret-0123", "pw-alice", "postgresql://u:p@db/x"):
        assert secret not in text
    assert 'api_key = "********"' in text
    assert 'trusted_header_secret = "********"' in text
    assert '"alice" = "********"' in text
    assert set(secret_values(config)) >= {"sk-real-key-000", "jwt-s3cret-0123456789", "proxy-s3cret-0123", "pw-alice"}


def test_config_check_prints_masked_config_and_exits_zero(tmp_path: Path) -> None:
    path = write(tmp_path, "[openai]\napi_key = 'sk-very-secret-1'\n")
    result = run_cli("--config", str(path), "config", "check")
    assert result.returncode == 0, result.stderr
    assert "sk-very-secret-1" not in result.stdout
    assert "[memory]" in result.stdout and "max_chars = 2000" in result.stdout


def test_config_check_warns_on_stderr_about_identities_nobody_can_use(tmp_path: Path) -> None:
    path = write(tmp_path, "[server]\njwt_secret = 'jwt-s3cret-0123456789'\n"
                           "trusted_header_sources = ['10.0.0.0/8']\n")
    result = run_cli("--config", str(path), "config", "check")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("voicegate: warning: ")]
    assert len(warnings) == 2, result.stderr
    assert "server.jwt_secret is set but server.api_key is not: POST /token refuses every request (403)" in warnings[0]
    assert "X-API-Key" in warnings[0]
    assert "server.trusted_header_secret is not" in warnings[1] and "X-Voicegate-Proxy-Secret" in warnings[1]
    assert "warning" not in result.stdout and "jwt-s3cret-0123456789" not in result.stdout + result.stderr
    configured = write(tmp_path, "[server]\njwt_secret = 'jwt-s3cret-0123456789'\napi_key = 'backend-key-01234'\n"
                                 "trusted_header_sources = ['10.0.0.0/8']\n"
                                 "trusted_header_secret = 'proxy-s3cret-0123'\n")
    quiet = run_cli("--config", str(configured), "config", "check")
    assert quiet.returncode == 0 and "warning" not in quiet.stderr, quiet.stderr


def test_config_check_warns_about_keys_and_tools_opened_to_callers(tmp_path: Path) -> None:
    path = write(tmp_path, "[sip]\nsend_dtmf_inbound = true\n[warm_transfer]\nrelay_caller_keys = true\n"
                           "[[mcp.servers]]\nname = 'faq'\nurl = 'http://127.0.0.1:9/mcp'\ntools = ['*']\n"
                           "require_identity = 'none'\n")
    result = run_cli("--config", str(path), "config", "check")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("voicegate: warning: ")]
    assert any("'faq' has require_identity = \"none\"" in line for line in warnings), result.stderr
    assert any("sip.send_dtmf_inbound is on" in line for line in warnings)
    assert any("warm_transfer.relay_caller_keys is on" in line for line in warnings)


def test_config_check_warns_that_opaque_mcp_caller_ids_differ_per_node_without_a_shared_secret(
        tmp_path: Path) -> None:
    server = "[[mcp.servers]]\nname = 'orders'\nurl = 'http://127.0.0.1:9/mcp'\ntools = ['*']\n"
    result = run_cli("--config", str(write(tmp_path, server)), "config", "check")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("voicegate: warning: ")]
    (warning,) = [line for line in warnings if "owner_key_secret" in line]
    assert "memory is off and memory.owner_key_secret is not set" in warning
    assert "mcp server 'orders' with a different opaque id from each node" in warning
    for quiet in ("[memory]\nowner_key_secret = 'shared-s3cret-0123'\n" + server,
                  server.replace("tools = ['*']", "tools = ['*']\ncaller_id = 'raw'")):
        result = run_cli("--config", str(write(tmp_path, quiet)), "config", "check")
        assert result.returncode == 0 and "owner_key_secret is not set" not in result.stderr, result.stderr


def test_config_check_on_a_broken_config_names_the_key_and_exits_one(tmp_path: Path) -> None:
    path = write(tmp_path, "[memory]\nmax_chars = -5\n")
    result = run_cli("config", "check", env={"VOICEGATE_CONFIG": str(path)})
    assert result.returncode == 1
    assert f"{path}: memory.max_chars: must be > 0 (got -5)" in result.stderr
    assert "Traceback" not in result.stderr


def test_version_flag() -> None:
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("voicegate ")
