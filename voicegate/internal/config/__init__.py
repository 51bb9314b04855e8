"""Configuration: pydantic-settings models, TOML + environment loading, validation messages."""

from voicegate.internal.config.checks import security_warnings
from voicegate.internal.config.display import masked, render_toml, secret_values
from voicegate.internal.config.loader import (
           DEFAULT_CONFIG,
           ENV_PREFIX,
           Config,
           ConfigError,
           config_path_from,
           load_config,
)

__all__ = ["DEFAULT_CONFIG", "ENV_PREFIX", "Config", "ConfigError", "config_path_from", "load_config", "masked",
           "render_toml", "secret_values", "security_warnings"]
