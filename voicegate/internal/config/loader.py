"""Load the effective config: defaults < config.toml < environment.

The environment has two forms: `VOICEGATE_<SECTION>__<KEY>` for every key (lists and tables as JSON),
and the conventional secret names (`OPENAI_API_KEY`, ...) that other tools already set. A bad value
fails with the place it came from, the key path and the reason, never a traceback.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from voicegate.internal.config.mcp import McpConfig
from voicegate.internal.config.providers import (
    AgentConfig,
    DeepgramConfig,
    EspeakConfig,
    LlmConfig,
    MemoryConfig,
    OllamaConfig,
    OpenAIConfig,
    PgvectorConfig,
    PiperConfig,
    PocketsphinxConfig,
    RagConfig,
    RealtimeConfig,
    SttConfig,
    SupabaseConfig,
    TelemetryConfig,
    TtsConfig,
    WhisperConfig,
)
from voicegate.internal.config.realtime_checks import realtime_errors
from voicegate.internal.config.recording import RecordingConfig
from voicegate.internal.config.sections import (
    AdmissionConfig,
    PipelineConfig,
    ServerConfig,
    SipConfig,
    WebRTCConfig,
)
from voicegate.internal.config.telephony import AmdConfig, DigitsConfig, MenusConfig, WarmTransferConfig
from voicegate.internal.phone_numbers import normalise_e164

ENV_PREFIX = "VOICEGATE_"
CONFIG_PATH_ENV = "VOICEGATE_CONFIG"
# Every key with its default and a one-line meaning: package data, so `voicegate config init` can write a
# copy wherever voicegate is installed. The checkout's ./config.toml is a link to this file.
DEFAULT_CONFIG: Traversable = files("voicegate.internal.config") / "config.toml"

# Conventional names for secrets, honoured so a deployer can reuse what their platform already sets.
# The explicit VOICEGATE_<SECTION>__<KEY> form wins over these.
SECRET_ENV_ALIASES: dict[str, tuple[str, str]] = {
    "OPENAI_API_KEY": ("openai", "api_key"),
    "DEEPGRAM_API_KEY": ("deepgram", "api_key"),
    "VOICEGATE_JWT_SECRET": ("server", "jwt_secret"),
    "VOICEGATE_API_KEY": ("server", "api_key"),
}


class ConfigError(Exception):
    """A config that cannot be used; the message names the source, the key and the reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class _SecretAliasSource(PydanticBaseSettingsSource):
    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        values: dict[str, dict[str, str]] = {}
        for env_name, (section, key) in SECRET_ENV_ALIASES.items():
            value = os.environ.get(env_name)
            if value:
                values.setdefault(section, {})[key] = value
        return values


class Config(BaseSettings):
    """The whole effective configuration. Build with `load_config`, not directly."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        case_sensitive=False,
        extra="forbid",
        validate_assignment=True,
    )

    server: ServerConfig = Field(default_factory=ServerConfig)
    admission: AdmissionConfig = Field(default_factory=AdmissionConfig)
    sip: SipConfig = Field(default_factory=SipConfig)
    webrtc: WebRTCConfig = Field(default_factory=WebRTCConfig)
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig)
    stt: SttConfig = Field(default_factory=SttConfig)
    tts: TtsConfig = Field(default_factory=TtsConfig)
    llm: LlmConfig = Field(default_factory=LlmConfig)
    openai: OpenAIConfig = Field(default_factory=OpenAIConfig)
    ollama: OllamaConfig = Field(default_factory=OllamaConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    realtime: RealtimeConfig = Field(default_factory=RealtimeConfig)
    deepgram: DeepgramConfig = Field(default_factory=DeepgramConfig)
    pocketsphinx: PocketsphinxConfig = Field(default_factory=PocketsphinxConfig)
    espeak: EspeakConfig = Field(default_factory=EspeakConfig)
    whisper: WhisperConfig = Field(default_factory=WhisperConfig)
    piper: PiperConfig = Field(default_factory=PiperConfig)
    rag: RagConfig = Field(default_factory=RagConfig)
    pgvector: PgvectorConfig = Field(default_factory=PgvectorConfig)
    supabase: SupabaseConfig = Field(default_factory=SupabaseConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    recording: RecordingConfig = Field(default_factory=RecordingConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)
    digits: DigitsConfig = Field(default_factory=DigitsConfig)
    amd: AmdConfig = Field(default_factory=AmdConfig)
    menus: MenusConfig = Field(default_factory=MenusConfig)
    warm_transfer: WarmTransferConfig = Field(default_factory=WarmTransferConfig)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Highest first: explicit env, conventional secret names, then the TOML file (passed as init).
        return env_settings, _SecretAliasSource(settings_cls), init_settings

    @property
    def data_dir(self) -> Path:
        return Path(self.server.data_dir).expanduser().resolve()

    @property
    def effective_llm_provider(self) -> str:
        if self.llm.provider == "auto":
            return "openai" if self.openai.api_key else "local"
        return self.llm.provider


def config_path_from(cli_path: str | None, environ: Mapping[str, str] | None = None) -> Path | None:
    """The config file to read: --config, else $VOICEGATE_CONFIG, else ./config.toml when present."""
    env = os.environ if environ is None else environ
    if cli_path:
        return Path(cli_path)
    if env.get(CONFIG_PATH_ENV):
        return Path(env[CONFIG_PATH_ENV])
    default = Path("config.toml")
    return default if default.is_file() else None


def load_config(path: Path | None = None) -> Config:
    """Read defaults, then the TOML file at `path` (if any), then the environment."""
    file_values: dict[str, Any] = {}
    if path is not None:
        try:
            file_values = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError([f"{path}: file not found"]) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError([f"{path}: not valid TOML: {exc}"]) from None
        except OSError as exc:
            raise ConfigError([f"{path}: cannot read: {exc.strerror}"]) from None
    env_paths = _env_key_paths(os.environ)
    try:
        config = Config(**file_values)
        # Once, here: every later use (the secret file, the outbox, embedded PostgreSQL) means the same
        # directory even if the process changes directory, and `config check` shows where it is.
        config.server.data_dir = str(config.data_dir)
    except ValidationError as exc:
        problems = [_describe_error(err, path, env_paths) for err in exc.errors()]
        raise ConfigError(problems) from None
    # Also once, here: a shared number that is compared unnormalised never matches, and its callers
    # would all get one memory; so one that cannot be read is an error, not a silent miss.
    numbers, unreadable = shared_numbers_e164(config.memory.shared_numbers, config.sip.default_region)
    if unreadable:
        origin = _origin(("memory", "shared_numbers"), path, env_paths)
        raise ConfigError([f"{origin}: memory.shared_numbers: not a phone number in region "
                           f"{config.sip.default_region} (sip.default_region): {number!r}" for number in unreadable])
    config.memory.shared_numbers = numbers
    # Values that each load but together cannot work (docs/realtime.md): refused here, like a bad value, so
    # `serve` never starts an agent whose every call would fail, and `config check` names the key.
    unworkable = realtime_errors(config.realtime, config.openai.api_key)
    if unworkable:
        raise ConfigError([f"{_origin(tuple(key.split('.')), path, env_paths)}: {key}: {reason}"
                           for key, reason in unworkable])
    return config


def shared_numbers_e164(numbers: list[str], region: str) -> tuple[list[str], list[str]]:
    """`numbers` in E.164 (duplicates dropped), and the ones that are not phone numbers."""
    normalised: list[str] = []
    unreadable: list[str] = []
    for number in numbers:
        e164 = normalise_e164(number, region)
        if e164 is None:
            unreadable.append(number)
        elif e164 not in normalised:
            normalised.append(e164)
    return normalised, unreadable


def _env_key_paths(environ: Mapping[str, str]) -> dict[tuple[str, ...], str]:
    """Map each key path set through VOICEGATE_* variables to the variable's name."""
    paths: dict[tuple[str, ...], str] = {}
    for name in environ:
        upper = name.upper()
        if upper.startswith(ENV_PREFIX) and "__" in upper:
            parts = tuple(part.lower() for part in upper[len(ENV_PREFIX) :].split("__"))
            paths[parts] = name
    for name, key_path in SECRET_ENV_ALIASES.items():
        if environ.get(name) and key_path not in paths:
            paths[key_path] = name
    return paths


def _describe_error(err: Mapping[str, Any], path: Path | None, env_paths: dict[tuple[str, ...], str]) -> str:
    loc = tuple(str(part) for part in err["loc"])
    return f"{_origin(loc, path, env_paths)}: {'.'.join(loc)}: {_reason(err)}"


def _origin(loc: tuple[str, ...], path: Path | None, env_paths: dict[tuple[str, ...], str]) -> str:
    """Where the value at `loc` came from: the variable that set it, else the file, else the defaults."""
    for depth in range(len(loc), 0, -1):
        if loc[:depth] in env_paths:
            return env_paths[loc[:depth]]
    return str(path) if path is not None else "defaults"


def _reason(err: Mapping[str, Any]) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    got = f" (got {err['input']!r})" if "input" in err and not isinstance(err["input"], dict) else ""
    bounds = {
        "greater_than": ("> ", "gt"),
        "greater_than_equal": (">= ", "ge"),
        "less_than": ("< ", "lt"),
        "less_than_equal": ("<= ", "le"),
    }
    if kind in bounds:
        sign, name = bounds[kind]
        bound = ctx.get(name)
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return f"must be {sign}{bound}{got}"
    if kind == "extra_forbidden":
        return "unknown key (see docs/configuration.md for the keys this section takes)"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}{got}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"must be a whole number{got}"
    if kind in ("float_parsing", "float_type"):
        return f"must be a number{got}"
    if kind in ("bool_parsing", "bool_type"):
        return f"must be true or false{got}"
    if kind in ("string_type",):
        return f"must be a string{got}"
    if kind in ("list_type",):
        return f"must be a list{got}"
    if kind == "missing":
        return "is required"
    if kind == "value_error":
        message = str(ctx.get("error", err["msg"]))
        return message if repr(err.get("input")) in message else f"{message}{got}"
    return f"{err['msg']}{got}"
