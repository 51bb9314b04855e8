"""`[realtime]` values that cannot work are refused (by `config check` and every command that loads the config),
naming the key, where it came from and why; combinations docs/realtime.md calls unwise are warned about."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli
from voicegate.internal.config import ConfigError, load_config, security_warnings

QWEN = ("[realtime]\nurl = 'wss://dashscope-intl.aliyuncs.com/api-ws/v1/realtime'\n"
        "model = 'qwen-omni-turbo-realtime'\ndialect = 'beta'\ninput_rate = 16000\noutput_rate = 24000\n"
        "api_key = 'sk-qwen-000000'\ntranscription_model = 'gummy-realtime-v1'\nvoice = 'Chelsie'\n")
QWEN_ON = QWEN.replace("[realtime]\n", "[realtime]\nenabled = true\n")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def warnings_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("voicegate: warning: ")]


def test_the_agent_on_without_a_key_is_refused_naming_the_key_and_where_keys_come_from(tmp_path: Path) -> None:
    path = write(tmp_path, "[realtime]\nenabled = true\n")
    result = run_cli("--config", str(path), "config", "check")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{path}: realtime.api_key: the Realtime agent is on (realtime.enabled) but no key is set" in result.stderr
    assert "OPENAI_API_KEY" in result.stderr and "VOICEGATE_REALTIME__API_KEY" in result.stderr
    # Either key will do: the section's own, or [openai]'s (here from the conventional variable).
    borrowed = run_cli("--config", str(path), "config", "check", env={"OPENAI_API_KEY": "sk-openai-0000000"})
    assert borrowed.returncode == 0, borrowed.stderr
    own = run_cli("--config", str(write(tmp_path, "[realtime]\nenabled = true\napi_key = 'sk-rt-0000000'\n")),
                  "config", "check")
    assert own.returncode == 0, own.stderr
    assert "sk-rt-0000000" not in own.stdout + own.stderr  # masked like every key


def test_a_url_that_is_not_a_websocket_is_refused_by_serve_too_naming_the_variable(tmp_path: Path) -> None:
    env = {"VOICEGATE_REALTIME__URL": "https://user:pw@api.openai.com/v1/realtime?api-key=secret-in-query"}
    result = run_cli("serve", env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert ("VOICEGATE_REALTIME__URL: realtime.url: must be a ws:// or wss:// URL "
            "(got 'https://api.openai.com/v1/realtime')") in result.stderr
    assert "secret-in-query" not in result.stderr and "pw@" not in result.stderr


def test_ga_takes_24_khz_only_and_openai_hosts_whatever_the_dialect(tmp_path: Path) -> None:
    ga = run_cli("--config", str(write(tmp_path, "[realtime]\ninput_rate = 16000\n")), "config", "check")
    assert ga.returncode == 1
    assert 'realtime.input_rate: must be 24000 with dialect "ga"' in ga.stderr and "(got 16000)" in ga.stderr
    assert "realtime.output_rate" not in ga.stderr
    beta_openai = write(tmp_path, "[realtime]\ndialect = 'beta'\noutput_rate = 16000\n")
    result = run_cli("--config", str(beta_openai), "config", "check")
    assert result.returncode == 1
    assert "realtime.output_rate: must be 24000 with OpenAI's and Azure OpenAI's Realtime API" in result.stderr


def test_qwen_omni_realtime_as_documented_loads_quietly(tmp_path: Path) -> None:
    result = run_cli("--config", str(write(tmp_path, QWEN_ON)), "config", "check")
    assert result.returncode == 0, result.stderr
    assert not [line for line in warnings_of(result.stderr) if "realtime" in line], result.stderr
    assert 'dialect = "beta"' in result.stdout and "input_rate = 16000" in result.stdout


def test_unwise_combinations_are_warned_about_not_refused(tmp_path: Path) -> None:
    toml = ("[realtime]\nenabled = true\napi_key = 'az-key-0000000'\n"
            "url = 'wss://myres.openai.azure.com/openai/v1/realtime?model=my-deployment'\n")
    result = run_cli("--config", str(write(tmp_path, toml)), "config", "check")
    assert result.returncode == 0, result.stderr
    warnings = warnings_of(result.stderr)
    assert any('Azure OpenAI resource but realtime.auth is "bearer"' in line for line in warnings), result.stderr
    assert any("names the model 'my-deployment' in its query, so realtime.model ('gpt-realtime') is not used" in line
               for line in warnings), result.stderr
    quiet = toml.replace("?model=my-deployment", "") + "auth = 'api-key'\nmodel = 'my-deployment'\n"
    assert not warnings_of(run_cli("--config", str(write(tmp_path, quiet)), "config", "check").stderr)


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("[realtime]\nenabled = true\nurl = 'ws://model.example.net/v1/realtime'\n",
         "realtime.url is ws:// to model.example.net: the key and every caller's voice cross the network unencrypted"),
        (QWEN_ON + "turn_detection = 'semantic_vad'\n",
         '"semantic_vad", which Qwen-Omni-Realtime does not offer'),
        (QWEN_ON.replace("transcription_model = 'gummy-realtime-v1'", "transcription_model = 'whisper-1'"),
         "'whisper-1', an OpenAI model, on Qwen-Omni-Realtime: use Qwen's (\"gummy-realtime-v1\")"),
        (QWEN_ON.replace("voice = 'Chelsie'", "voice = 'alloy'"),
         "realtime.voice is 'alloy', an OpenAI voice, on Qwen-Omni-Realtime"),
        ("[realtime]\nenabled = true\nauth = 'api-key'\n", 'realtime.url is OpenAI\'s but realtime.auth is "api-key"'),
    ],
)
def test_each_documented_unwise_combination_has_its_warning(tmp_path: Path, toml: str, expected: str) -> None:
    config = load_config(write(tmp_path, toml + "[openai]\napi_key = 'sk-openai-0000000'\n"))
    assert any(expected in warning for warning in security_warnings(config)), security_warnings(config)


def test_a_local_ws_endpoint_and_an_agent_that_is_off_are_not_warned_about(tmp_path: Path) -> None:
    local = load_config(write(tmp_path, "[realtime]\nenabled = true\napi_key = 'k'\n"
                                        "url = 'ws://127.0.0.1:9/v1/realtime'\n"))
    assert not [w for w in security_warnings(local) if "realtime" in w]
    off = load_config(write(tmp_path, "[realtime]\nurl = 'ws://model.example.net/v1/realtime'\nauth = 'api-key'\n"))
    assert not [w for w in security_warnings(off) if "realtime" in w]


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("[realtime]\nurl = 'api.openai.com/v1/realtime'\n", "realtime.url: must be a ws:// or wss:// URL"),
        ("[realtime]\nurl = 'wss:///v1/realtime'\n", "realtime.url: has no host"),
        ("[realtime]\noutput_rate = 16000\n", 'realtime.output_rate: must be 24000 with dialect "ga"'),
        ("[realtime]\nenabled = true\n[openai]\napi_key = ''\n", "realtime.api_key: the Realtime agent is on"),
    ],
)
def test_load_refuses_naming_file_key_and_reason(tmp_path: Path, toml: str, expected: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    path = write(tmp_path, toml)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert f"{path}: {expected}" in str(caught.value)


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("[rag]\nprovider = 'pgvector'\n", "rag.provider is 'pgvector' but the Realtime agent answers the calls"),
        ("[digits.forms.account]\nprompt = 'Your account number, then hash.'\n",
         "[digits] forms are set but the Realtime agent cannot run a digit form"),
        ("[memory]\nenabled = true\ninjection = 'retrieval'\n",
         'memory.injection is "retrieval" but the Realtime agent'),
        ("[llm]\nprovider = 'agent'\n[agent]\nurl = 'http://127.0.0.1:9/agent'\n",
         'llm.provider is "agent" but the Realtime model answers the calls'),
        ("[recording]\nenabled = true\n", 'recording.consent is "ask" but the Realtime model hears the caller'),
    ],
)
def test_a_feature_the_realtime_agent_does_without_is_warned_about_when_on(tmp_path: Path, toml: str,
                                                                            expected: str) -> None:
    on = load_config(write(tmp_path, "[realtime]\nenabled = true\napi_key = 'sk-rt-0000000'\n" + toml))
    assert any(expected in warning for warning in security_warnings(on)), security_warnings(on)
    off = load_config(write(tmp_path, toml))
    assert not any(expected in warning for warning in security_warnings(off))
