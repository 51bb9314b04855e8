"""`[[mcp.servers]]` and `[recording]` as an operator writes them: clear errors naming the key, secrets
masked, and the fence around a tool's result holding whatever the result says."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voicegate.internal.config import ConfigError, load_config, masked, render_toml, secret_values
from voicegate.internal.tools.mcp import parameters_of, registered_name
from voicegate.internal.tools.mcp_results import CLOSE, fenced


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


SERVER = "[[mcp.servers]]\nname = 'orders'\n"


@pytest.mark.parametrize(("toml", "expected"), [
    ("[[mcp.servers]]\nname = 'a'\ncommand = 'x'\nurl = 'http://h/mcp'\n",
     "mcp.servers.0: server 'a': set command (stdio) or url (streamable HTTP), exactly one"),
    (SERVER, "set command (stdio) or url (streamable HTTP), exactly one"),
    (SERVER + "url = 'ftp://h/mcp'\n", "mcp.servers.0.url: must be an http:// or https:// URL"),
    (SERVER + "command = 'x'\ntools = ['*', 'search']\n", '"*" offers every tool the server lists; give it alone'),
    ("[[mcp.servers]]\nname = 'bad name'\ncommand = 'x'\n", "mcp.servers.0.name: must be 1-32 letters"),
    (SERVER + "command = 'x'\n" + SERVER + "command = 'y'\n", "server names must be unique: orders"),
    (SERVER + "command = 'x'\nenabled_for = ['fax']\n", "mcp.servers.0.enabled_for.0: must be one of"),
    (SERVER + "url = 'http://h/mcp'\nheaders_env = { Authorization = 'NO_SUCH_VARIABLE_X' }\n",
     "headers_env names $NO_SUCH_VARIABLE_X for 'Authorization', which is not set in the environment"),
    (SERVER + "command = 'x'\ntimeout_s = 0\n", "mcp.servers.0.timeout_s: must be > 0"),
    ("[recording]\nformat = 'mp3'\n", "recording.format: must be one of 'wav' or 'opus'"),
    ("[recording]\nconsent = 'maybe'\n", "recording.consent: must be one of 'announce', 'ask' or 'none'"),
    ("[recording]\nopt_out_key = '99'\n", "recording.opt_out_key: must be one keypad key"),
])
def test_bad_servers_and_recording_keys_are_refused_naming_the_key(tmp_path: Path, toml: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, toml))
    assert expected in str(caught.value), str(caught.value)


def test_headers_from_the_environment_and_every_header_and_env_value_masked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORDERS_TOKEN", "Bearer tok-s3cret-123")
    config = load_config(write(tmp_path, SERVER + "url = 'https://tools.example/mcp'\n"
                                         "headers = { X-Tenant = 'acme-private' }\n"
                                         "headers_env = { Authorization = 'ORDERS_TOKEN' }\ntools = ['*']\n"
                                         "[[mcp.servers]]\nname = 'local'\ncommand = 'tool-server'\n"
                                         "env = { API_KEY = 'env-s3cret' }\ntools = ['lookup']\n"))
    server = config.mcp.servers[0]
    assert server.headers == {"X-Tenant": "acme-private", "Authorization": "Bearer tok-s3cret-123"}
    text = render_toml(masked(config))
    for secret in ("tok-s3cret-123", "acme-private", "env-s3cret"):
        assert secret not in text
    assert set(secret_values(config)) >= {"Bearer tok-s3cret-123", "acme-private", "env-s3cret"}
    assert config.mcp.servers[1].allows("lookup") and not config.mcp.servers[1].allows("delete")


def test_a_program_arguments_secret_is_redacted_alone_and_after_a_secret_named_flag(tmp_path: Path) -> None:
    from voicegate.internal.telemetry.logs import REDACTED, Redactor

    config = load_config(write(tmp_path, SERVER + "command = 'tool-server'\ntools = ['*']\n"
                                         "args = ['stdio', '--api-key=flag-s3cret-42', '--password', 'hunter2',"
                                         " '--auth', '-not-a-flag-s3cret', '--verbose']\n"))
    text = render_toml(masked(config))
    assert "'stdio', '--api-key=********', '--password', '********', '--auth', '********', '--verbose'" in \
        text.replace('"', "'")
    redact = Redactor(secret_values(config))
    for secret in ("flag-s3cret-42", "hunter2", "-not-a-flag-s3cret"):
        assert secret not in text
        assert redact(f"tool-server: cannot log in with {secret}") == f"tool-server: cannot log in with {REDACTED}"
    assert redact("tool-server: stdio --verbose") == "tool-server: stdio --verbose"


def test_tool_names_the_model_sees_are_safe_and_schemas_are_objects() -> None:
    assert registered_name("orders", "look up/v2") == "orders__look_up_v2"
    assert len(registered_name("s", "x" * 100)) == 64
    assert parameters_of({"type": "string"}) == {"type": "object", "properties": {}}


@given(st.text(max_size=3000), st.integers(min_value=200, max_value=3000))
def test_no_result_leaves_its_fence_or_its_bound(text: str, bound: int) -> None:
    out = fenced("orders", "lookup</tool_result>", text, bound)
    assert len(out) <= bound
    assert out.startswith('<tool_result server="orders" tool="lookup__tool_result_">\n')
    assert out.endswith(CLOSE) and out.count("<") == 2 and out.count(">") == 2  # the fence's own, nothing else


def test_config_check_warns_about_recording_without_consent_or_key_and_an_empty_allow_list(tmp_path: Path) -> None:
    from voicegate.internal.config import security_warnings

    config = load_config(write(tmp_path, "[recording]\nenabled = true\nconsent = 'none'\n"
                                         "[[mcp.servers]]\nname = 'orders'\ncommand = 'x'\n"))
    warnings = "\n".join(security_warnings(config))
    assert 'recording.consent is "none"' in warnings and "GET /calls/{id}/recording refuses" in warnings
    assert "mcp server 'orders' has an empty tools allow-list" in warnings
