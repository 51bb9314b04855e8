"""Show the effective config to an operator with every secret masked."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from voicegate.internal.config.loader import Config

MASK = "********"
_SECRET_WORDS = ("api_key", "secret", "password", "credential", "connection_string")
# Mappings whose every value is a secret: [sip.auth] users (passwords), and an MCP server's headers (tokens)
# and env (the keys its program reads).
_SECRET_MAPPINGS = ("users", "headers", "env")


# Values shown as they are although not secrets by name: a URL may carry a token in its userinfo or its
# query, and an MCP server's program arguments may carry one anywhere.
_URL_KEYS = ("url", "base_url")
_ARGS_KEYS = ("args",)
_PLAIN_ARG = re.compile(r"[a-z][a-z0-9_.-]{0,15}")  # a subcommand ("stdio", "serve"), not a token
# A flag named like one of these takes a credential: the argument after it is one, however plain it looks
# (`--password hunter2`). Over-matching (`--keyboard us`) only masks an argument that was harmless.
_SECRET_FLAG_WORDS = ("token", "key", "secret", "password", "passwd", "pwd", "auth", "credential", "bearer")
_URL_IN_TEXT = re.compile(r"https?://[^\s\"'<>]+")


def is_secret_key(key: str) -> bool:
    return any(word in key.lower() for word in _SECRET_WORDS)


def mask_url(url: str) -> str:
    """`url` with its userinfo and its query values masked (`https://********@host/mcp?key=********`)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK
    if not parts.scheme or not parts.netloc:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        netloc = MASK + "@" + netloc.rpartition("@")[2]
    query = "&".join(f"{name}={MASK}" for name, _ in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query, MASK if parts.fragment else ""))


def mask_urls_in(text: str) -> str:
    """Every http(s) URL in `text` masked (an error message that quotes the URL it failed on)."""
    return _URL_IN_TEXT.sub(lambda match: mask_url(match.group(0)), text)


def mask_arg(arg: str) -> str:
    """One program argument as an operator may see it: a flag (its value after "=" masked), a file that
    exists, a short plain word or a URL (masked) shown; anything else, which may be a token, masked."""
    if arg.startswith("-"):
        flag, equals, _value = arg.partition("=")
        return f"{flag}={MASK}" if equals else arg
    if _URL_IN_TEXT.fullmatch(arg):
        return mask_url(arg)
    if _PLAIN_ARG.fullmatch(arg) or ("/" in arg and Path(arg).exists()):
        return arg
    return MASK


def is_secret_flag(arg: str) -> bool:
    """A flag whose value is a credential, given alone (`--token`) so that the next argument is the value."""
    return arg.startswith("-") and "=" not in arg and any(word in arg.lower() for word in _SECRET_FLAG_WORDS)


def masked_args(args: list[str]) -> list[str]:
    return [MASK if index and is_secret_flag(args[index - 1]) else mask_arg(arg) for index, arg in enumerate(args)]


def arg_secrets(args: list[str]) -> list[str]:
    """What the log must redact of a program's arguments: every argument the operator is not shown, and
    the value alone too (`--api-key=VALUE`, a URL's token), since the program may print it without its flag."""
    found: list[str] = []
    for arg, shown in zip(args, masked_args(args), strict=True):
        if shown == arg:
            continue
        found.append(arg)
        if arg.startswith("-") and "=" in arg:
            found.append(arg.partition("=")[2])
        elif _URL_IN_TEXT.fullmatch(arg):
            found.extend(url_secrets(arg))
    return found


def masked(config: Config) -> dict[str, Any]:
    """The config as a plain dict, secrets replaced by a mask (an empty secret stays empty)."""
    return _mask(config.model_dump(mode="json"), parent="")


def _mask(value: Any, parent: str) -> Any:
    if isinstance(value, dict):
        if parent in _SECRET_MAPPINGS:
            return {name: MASK if secret else "" for name, secret in value.items()}
        return {k: (MASK if is_secret_key(k) and v else _mask(v, k)) for k, v in value.items()}
    if parent in _URL_KEYS and isinstance(value, str):
        return mask_url(value)
    if parent in _ARGS_KEYS and isinstance(value, list):
        return masked_args([str(item) for item in value])
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
                elif key in _URL_KEYS and isinstance(item, str):
                    found.extend(url_secrets(item))
                elif key in _ARGS_KEYS and isinstance(item, list):
                    found.extend(arg_secrets([str(arg) for arg in item]))
                else:
                    walk(item, key)
        elif isinstance(value, list):
            for item in value:
                walk(item, parent)

    walk(config.model_dump(mode="json"), "")
    return found


def url_secrets(url: str) -> list[str]:
    """The parts of a URL that may be credentials: its userinfo and its query values."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found = [value for _, value in parse_qsl(parts.query) if value]
    if "@" in parts.netloc:
        userinfo = parts.netloc.rpartition("@")[0]
        found += [userinfo, *userinfo.split(":")[1:]]
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
