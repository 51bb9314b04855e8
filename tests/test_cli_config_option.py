"""`--config` is accepted before or after any command, at any depth; the last one given wins."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from voicegate.server.cli import build_parser, main


def leaf_commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every runnable command path of the real parser (`serve`, `memory show`, ...), found by walking it."""
    found: list[tuple[str, ...]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.extend(leaf_commands(sub, (*path, name)))
    return found or [path]


def parser_at(path: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        (subs,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = subs.choices[name]
    return parser


def required_arguments(parser: argparse.ArgumentParser) -> list[str]:
    """The least a command needs to parse: a value for each positional and each required option or group."""
    argv: list[str] = []
    satisfied: set[int] = set()
    for group in parser._mutually_exclusive_groups:
        if group.required:
            first = group._group_actions[0]
            argv += [first.option_strings[0], "x"]
            satisfied.update(id(a) for a in group._group_actions)
    for action in parser._actions:
        if id(action) in satisfied or isinstance(action, argparse._HelpAction):
            continue
        value = str(next(iter(action.choices))) if action.choices else "x.wav"
        if not action.option_strings and action.nargs != "*":
            argv.append(value)
        elif action.option_strings and action.required:
            argv += [action.option_strings[0], value]
    return argv


COMMANDS = leaf_commands(build_parser())


def test_the_walk_finds_the_commands_people_use() -> None:
    assert {("serve",), ("config", "check"), ("memory", "show"), ("rag", "ingest"), ("call",)} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_accepts_config_before_and_after_it(command: tuple[str, ...]) -> None:
    rest = required_arguments(parser_at(command))
    before = build_parser().parse_args(["--config", "before.toml", *command, *rest])
    after = build_parser().parse_args([*command, *rest, "--config", "after.toml"])
    assert before.config == "before.toml"
    assert after.config == "after.toml"


def test_the_later_config_wins_and_a_command_without_one_keeps_the_earlier() -> None:
    both = build_parser().parse_args(["--config", "first.toml", "memory", "show", "--caller", "x",
                                      "--config", "second.toml"])
    assert both.config == "second.toml"
    only_top = build_parser().parse_args(["--config", "top.toml", "memory", "show", "--caller", "x"])
    assert only_top.config == "top.toml"
    assert getattr(build_parser().parse_args(["serve"]), "config", None) is None


@pytest.mark.parametrize("position", ["before", "after"])
def test_config_check_prints_a_setting_from_the_file_given_in_either_position(
    position: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[server]\nport = 18123\n')
    argv = ["--config", str(config), "config", "check"] if position == "before" else \
        ["config", "check", "--config", str(config)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"from {config}" in out
    assert "port = 18123" in out


def test_the_makefile_serve_line_passes_config_where_the_cli_accepts_it(tmp_path: Path) -> None:
    config = tmp_path / "my config.toml"  # a space, as in many home directories
    dry_run = subprocess.run(["make", "-n", "serve", f"CONFIG={config}"], cwd=REPO, capture_output=True,
                             text=True, check=True, timeout=30).stdout
    (line,) = [line for line in dry_run.splitlines() if "bin/voicegate" in line]
    argv = shlex.split(line)[1:]
    assert build_parser().parse_args(argv).config == str(config)


def test_the_sub_command_modules_import_without_the_cli_that_registers_them() -> None:
    """No import circle: server.cli imports the command modules, never the other way round."""
    probe = ("import sys, voicegate.server.cli_common, voicegate.server.cli_logging, voicegate.server.memory_cli, "
             "voicegate.server.rag_cli, voicegate.server.call_cli; print('voicegate.server.cli' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_data_dir_is_accepted_anywhere_and_wins_over_the_file_and_the_environment(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[server]\ndata_dir = "from-file"\n')
    for argv in (["--data-dir", "from-flag", "config", "check"], ["config", "check", "--data-dir", "from-flag"]):
        done = run_cli(*argv, cwd=tmp_path, env={"VOICEGATE_SERVER__DATA_DIR": "from-env"})
        assert done.returncode == 0, done.stderr
        assert f'data_dir = "{tmp_path / "from-flag"}"' in done.stdout  # relative to where it was started
    without = run_cli("config", "check", cwd=tmp_path, env={"VOICEGATE_SERVER__DATA_DIR": "from-env"})
    assert f'data_dir = "{tmp_path / "from-env"}"' in without.stdout
