"""Show the effective config to an operator with every secret masked."""

from __future__ import annotations

import json
from typing import Any

from internal.config.loader import Config

MASK = "********"
_SECRET_WORDS = ("api_key", "secret", "password", "credential", "connection_string")
# Mappings whose every value is a secret: [sip.auth] users (passwords), and an MCP server's headers (tokens)
# and env (the keys its program reads).
_SECRET_MAPPINGS = ("users", "headers", "env")


def is_secret_key(key: str) -> bool:
    return any(word in key.lower() for word in _SECRET_WORDS)


def masked(config: Config) -> dict[str, Any]:
    """The config as a plain dict, secrets replaced by a mask (an empty secret stays empty)."""
    return _mask(config.model_dump(mode="json"), parent="")


def _mask(value: Any, parent: str) -> Any:
    if isinstance(value, dict):
        if parent in _SECRET_MAPPINGS:
            return {name: MASK if secret else "" for name, secret in value.items()}
        return {k: (MASK if is_secret_key(k) and v else _mask(v, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(item, parent) for item in value]
    return value


def secret_values(config: Config) -> list[str]:
    """Every non-empty secret in the config, for the log redaction filter."""
    found: list[str] = []

    def walk(value: Any, parent: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if parent in _SECRET_MAPPINGS and isinstance(item, str) and item:
                    found.append(item)
                elif is_secret_key(key) and isinstance(item, str) and item:
                    found.append(item)
                else:
                    walk(item, key)
        elif isinstance(value, list):
            for item in value:
                walk(item, parent)

    walk(config.model_dump(mode="json"), "")
    return found


def render_toml(values: dict[str, Any]) -> str:
    """A TOML rendering of `masked(config)`: each section a table, nested sections as [a.b]."""
    lines: list[str] = []

    def is_table(key: str, value: Any) -> bool:
        # Mappings of names to secrets are shown inline, not as tables.
        return isinstance(value, dict) and key not in _SECRET_MAPPINGS

    def emit(table: dict[str, Any], header: str) -> None:
        lines.append(f"[{header}]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in table.items() if not is_table(k, v))
        lines.append("")
        for key, value in table.items():
            if is_table(key, value):
                emit(value, f"{header}.{key}")

    for section, table in values.items():
        emit(table, section)
    return "\n".join(lines).rstrip() + "\n"


def _toml_value(value: Any) -> str:
    if value is None:
        return '"" # unset'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, dict):
        inner = ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value)
