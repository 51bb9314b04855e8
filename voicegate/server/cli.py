"""`voicegate`: serve, check the config, migrate the database (more commands join as they land)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from voicegate.server.cli_commands import add_command_modules
from voicegate.server.cli_common import CommandParser, config_argument, data_dir_argument

if TYPE_CHECKING:
    from voicegate.internal.config import Config

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

Command = Callable[[argparse.Namespace, "Config"], int]


class VersionAction(argparse.Action):
    """`--version`: the label is worked out when asked for, not while every command builds its parser (in a
    checkout it asks git, two processes)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str = "show program's version number and exit") -> None:
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        from voicegate.server.version import version_label

        print(f"voicegate {version_label()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    # CommandParser gives this parser and every sub-command `--config`: before or after the command.
    parser = CommandParser(prog="voicegate", description="A voice-agent server for SIP and WebRTC.")
    parser.add_argument("--version", action=VersionAction)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the server (HTTP, WebRTC, SIP)")
    serve.set_defaults(run=_run_serve)

    config = commands.add_parser("config", help="inspect the configuration")
    config_commands = config.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    check = config_commands.add_parser("check", help="validate and print the effective config, secrets masked")
    check.set_defaults(run=_run_config_check)
    init = config_commands.add_parser("init", help="write the default config, every key commented, to start from")
    init.add_argument("path", nargs="?", default="config.toml", metavar="PATH",
                      help="where to write it (default: ./config.toml; - prints it)")
    init.add_argument("--force", action="store_true", help="overwrite PATH if it exists")
    # Run before any config is loaded: writing a new config must work while the current one is broken.
    init.set_defaults(run=_run_config_init, run_unloaded=_run_config_init)

    migrate = commands.add_parser("migrate", help="apply database migrations")
    migrate.set_defaults(run=_run_migrate)

    add_command_modules(commands)  # memory, rag, call, eval, doctor: their handlers load when they run

    talk = commands.add_parser("talk", help="run one conversation from WAV files through the real pipeline")
    talk.add_argument("files", nargs="*", metavar="FILE.wav", help="the caller's turns, one file each")
    talk.add_argument("--out", help="write the agent's audio to this WAV file")
    talk.add_argument("--speed", type=float, default=1.0, help="play faster than real time (default 1)")
    talk.add_argument("--mic", action="store_true", help="talk live through the default microphone (sox)")
    talk.set_defaults(run=_run_talk)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return EXIT_USAGE
    # Only a command that runs loads the config (pydantic and the settings models: ~0.2 s of imports):
    # `--help`, `--version` and usage errors have already left in parse_args.
    from voicegate.internal.config import ENV_PREFIX, ConfigError, config_path_from, load_config

    path = config_path_from(config_argument(args))
    data_dir = data_dir_argument(args)
    if data_dir is not None:
        # A shorthand for the variable, set before anything loads the config: every loader in this process
        # (the doctor's own, the memory tools') and every worker it starts then means the same directory.
        os.environ[f"{ENV_PREFIX}SERVER__DATA_DIR"] = data_dir
    if getattr(args, "run_unloaded", None):  # `doctor`: reports a config that does not load
        return int(args.run_unloaded(args, path))
    try:
        config = load_config(path)
    except ConfigError as exc:
        print("voicegate: the configuration has errors:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_ERROR
    args.config_path = path
    run: Command = args.run
    return run(args, config)


def _run_config_check(args: argparse.Namespace, config: Config) -> int:
    from voicegate.internal.config import masked, render_toml, security_warnings

    source = args.config_path or "defaults and environment"
    print(f"# effective configuration (from {source}); secrets masked")
    print(render_toml(masked(config)), end="")
    for warning in security_warnings(config):  # stderr, so stdout stays a config file
        print(f"voicegate: warning: {warning}", file=sys.stderr)
    return EXIT_OK


def _run_config_init(args: argparse.Namespace, _path: object) -> int:
    from voicegate.server.config_init import ConfigInitError, default_config_text, write_default_config

    if args.path == "-":  # e.g. out of a container image: docker run --rm voicegate config init - > config.toml
        print(default_config_text(), end="")
        return EXIT_OK
    try:
        written = write_default_config(Path(args.path), overwrite=args.force)
    except ConfigInitError as exc:
        print(f"voicegate config init: {exc}", file=sys.stderr)
        return EXIT_ERROR
    # ./config.toml is read without being named; any other file has to be given to every command.
    check = "voicegate config check" if written.resolve() == Path("config.toml").resolve() \
        else f"voicegate --config {written} config check"
    print(f"wrote {written}: every key with its default, commented. Change what you need, then run `{check}`.")
    return EXIT_OK


def _run_migrate(args: argparse.Namespace, config: Config) -> int:
    from voicegate.internal.db import Database, EmbeddedPostgresError, MigrationError
    from voicegate.server.cli_logging import configure_tool_logging

    async def migrate() -> list[str]:
        database = Database(config.pgvector, config.data_dir)
        try:
            await database.open(run_migrations=False)
            return await database.migrate()
        finally:
            await database.close()

    configure_tool_logging(config)
    try:
        applied = asyncio.run(migrate())
    except (MigrationError, EmbeddedPostgresError) as exc:
        print(f"voicegate migrate: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:
        print(f"voicegate migrate: cannot reach the database: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else "; up to date"))
    return EXIT_OK


def _run_talk(args: argparse.Namespace, config: Config) -> int:
    from voicegate.internal.config import ConfigError
    from voicegate.server.cli_logging import configure_command_logging
    from voicegate.server.providers import check_providers
    from voicegate.server.talk import run_mic, run_talk

    try:
        check_providers(config)
    except ConfigError as exc:
        print("voicegate talk: " + "; ".join(exc.problems), file=sys.stderr)
        return EXIT_ERROR
    configure_command_logging(config, level="warning")
    if args.mic:
        return run_mic(config)
    if not args.files:
        print("voicegate talk: give one or more WAV files (or --mic)", file=sys.stderr)
        return EXIT_USAGE
    return run_talk(config, args.files, args.out, args.speed)


def _run_serve(args: argparse.Namespace, config: Config) -> int:
    from voicegate.internal.config import ConfigError
    from voicegate.server.cli_logging import configure_command_logging
    from voicegate.server.providers import check_providers
    from voicegate.server.serve import serve

    try:
        check_providers(config)
    except ConfigError as exc:
        print("voicegate: the configuration has errors:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_ERROR
    from voicegate.server.node import resolve_node_id

    # Decided once, here, and kept in the config: the logs, the gateway and the memory notices read it.
    config.server.node_id = resolve_node_id(config.server.node_id)
    configure_command_logging(config)
    from voicegate.server.event_loop import event_loop_factory

    with asyncio.Runner(loop_factory=event_loop_factory(config.server.event_loop)) as runner:
        return runner.run(serve(config, args.config_path))


if __name__ == "__main__":
    sys.exit(main())
