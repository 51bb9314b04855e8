"""What every `voicegate` (sub)command shares: `--config` and `--data-dir`, accepted at any level.

People type `voicegate serve --config x.toml`; the Makefile used to put it there too, and argparse only
knows an option on the parser that declared it. `CommandParser` declares `--config` on itself, and
`add_subparsers` builds each sub-parser with the class of its parent, so every command, nested actions
(`memory show`) and commands added later (by any module) accept it without doing anything.

A module of its own, importing nothing from `server.cli`, so the sub-command modules and `server.cli`
both depend on it and never on each other at import time.
"""

from __future__ import annotations

import argparse
from typing import Any

CONFIG_HELP = "path to config.toml (default: $VOICEGATE_CONFIG, else ./config.toml); the last one given wins"
DATA_DIR_HELP = ("where data lives: embedded PostgreSQL, owner-key secret, outbox, audit log (server.data_dir; "
                 "the same as VOICEGATE_SERVER__DATA_DIR=DIR, over the config file)")


def config_parent() -> argparse.ArgumentParser:
    """A parent parser holding `--config` and `--data-dir`, for a parser that is not a `CommandParser`.

    The values default to SUPPRESS: a sub-command given no `--config` must leave the one given before it
    (`voicegate --config x serve`) in place instead of resetting it to None.
    """
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--config", default=argparse.SUPPRESS, metavar="PATH", help=CONFIG_HELP)
    parent.add_argument("--data-dir", default=argparse.SUPPRESS, metavar="DIR", help=DATA_DIR_HELP)
    return parent


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose every sub-parser, at any depth, accepts `--config` and `--data-dir`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["parents"] = [*kwargs.get("parents", ()), config_parent()]
        super().__init__(*args, **kwargs)

    def add_subparsers(self, **kwargs: Any) -> Any:
        # argparse's default already is type(self); stated so a caller's parser_class cannot drop --config.
        kwargs.setdefault("parser_class", CommandParser)
        return super().add_subparsers(**kwargs)


def config_argument(args: argparse.Namespace) -> str | None:
    """The `--config` given anywhere on the command line (the last one), or None."""
    value = getattr(args, "config", None)
    return str(value) if value is not None else None


def data_dir_argument(args: argparse.Namespace) -> str | None:
    """The `--data-dir` given anywhere on the command line (the last one), or None."""
    value = getattr(args, "data_dir", None)
    return str(value) if value is not None else None
